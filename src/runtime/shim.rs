//! `berth shim`: the small process that owns one container instance, so that containers
//! outlive a restart of berth and their exit codes are never lost. It starts the container
//! in a process group of its own, records its pid (and start time, to tell a reused pid
//! apart), copies stdout and stderr into a timestamped log file (CRI format, rotated by
//! size), waits for the container, and records how it ended. Every record is written to a
//! temporary name and renamed, so a reader never sees half of one.
//!
//! A container with volumes gets a mount namespace of its own: the shim unshares it before
//! starting the container (which inherits it), makes every mount private and bind-mounts
//! each volume at its path. There is no root filesystem of its own: a mount point the
//! host lacks is made in the container's namespace only, over a shadow of the directory
//! above it ([`super::mountpoint`]), so the host's filesystem is never written.
//!
//! For `kubectl attach` the shim serves the unix socket `attach` in the instance
//! directory: an attached client gets the container's output from then on and, when the
//! container has `stdin`, writes to its stdin; with `tty` the container runs on a
//! pseudo-terminal the client can resize. Frames both ways are `[stream][u32 length][data]`
//! with the streams of `channel.k8s.io`: 0 stdin, 1 stdout, 2 stderr, 4 resize (JSON
//! `{"Width":w,"Height":h}`), 255 "the client's stdin ended".

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Mount;
use super::cgroup::Placement;
use super::pty;
use rustix::process::Pid;

/// Where the shim of one instance keeps its records.
pub const PID_FILE: &str = "pid";
/// The shim's own process (written by the runtime that started it).
pub const SHIM_FILE: &str = "shim";
/// Where the container's termination message comes from (a [`super::TerminationMessage`]).
pub const TERMINATION_FILE: &str = "termination";
/// The file the container writes its termination message to (bind-mounted at its path).
pub const TERMINATION_LOG: &str = "termination-log";
/// The most of a termination message file that is kept.
const MAX_MESSAGE: u64 = 4096;
/// The most of a log tail that stands in for an empty message, in lines and bytes.
const FALLBACK_LINES: usize = 80;
const FALLBACK_BYTES: usize = 2048;
pub const EXIT_FILE: &str = "exit";
pub const LOG_FILE: &str = "log";
/// The volumes to mount (a [`MountSetup`]); absent when there are none.
pub const MOUNTS_FILE: &str = "mounts";

/// The sandbox whose network and UTS namespaces a command on this machine joins (a
/// [`Join`]); absent when it runs in berth's.
pub const JOIN_FILE: &str = "join";

/// The process holding a pod sandbox's namespaces, told apart from a reused pid by its
/// start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Join {
    pub pid: i32,
    pub start_ticks: u64,
}

/// Moves this (single-threaded) process into the network and UTS namespaces of the
/// sandbox `join` names, which the container then inherits.
pub fn join_sandbox(join: &Join) -> io::Result<()> {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    if start_ticks(join.pid) != Some(join.start_ticks) {
        return Err(io::Error::other(
            "the pod's sandbox is gone (its holder of namespaces ended)",
        ));
    }
    for (file, kind) in [
        ("net", LinkNameSpaceType::Network),
        ("uts", LinkNameSpaceType::HostNameAndNISDomainName),
    ] {
        let path = format!("/proc/{}/ns/{file}", join.pid);
        let ns = File::open(&path)?;
        move_into_link_name_space(std::os::fd::AsFd::as_fd(&ns), Some(kind))
            .map_err(|e| io::Error::other(format!("join the pod's {file} namespace: {e}")))?;
    }
    Ok(())
}

/// What the shim of a container with volumes does before starting it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountSetup {
    pub mounts: Vec<Mount>,
    /// The container's working directory (default `/`), entered once the volumes are
    /// mounted (the shim itself starts in `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<PathBuf>,
}

/// Where the container's cgroups are ([`Placement`]), when the runtime made some.
pub const CGROUP_FILE: &str = "cgroup";

pub const ATTACH_SOCKET: &str = "attach";

/// Frames an attached client may have queued before it counts as gone.
const CLIENT_QUEUE: usize = 1024;
/// How long a write to an attached client may block before it counts as gone.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest frame an attached client may send.
const MAX_FRAME: usize = 1 << 20;

/// Longest piece of a line written as one log entry; longer lines are split (tag `P`).
const MAX_LINE: usize = 16 * 1024;

/// The container's process, as the shim recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    pub pid: i32,
    /// Start time of the process in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
    pub started_at: String,
}

/// How the container ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub finished_at: String,
    /// Set when the container could not be started at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it ended, when the exit code does not say it all (`OOMKilled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The container's termination message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The termination message of the container of `dir` that ended with `code`: what it
/// wrote to its file, else (when asked, and it failed) the tail of its log.
fn termination_message(dir: &Path, code: i32) -> Option<String> {
    let how: super::TerminationMessage = read_record(dir, TERMINATION_FILE)?;
    let mut text = Vec::new();
    if how.path.is_some()
        && let Ok(f) = File::open(dir.join(TERMINATION_LOG))
    {
        let _ = f.take(MAX_MESSAGE).read_to_end(&mut text);
    }
    if text.is_empty() && how.fallback_to_logs && code != 0 {
        let opts = super::logs::Options {
            tail_lines: Some(FALLBACK_LINES),
            ..Default::default()
        };
        let (log, _) = super::logs::read(dir, &opts).ok()?;
        text = log[log.len().saturating_sub(FALLBACK_BYTES)..].to_vec();
    }
    (!text.is_empty()).then(|| String::from_utf8_lossy(&text).into_owned())
}

/// Log rotation: rotate when the file passes `max_bytes`, keep `files` files in all.
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    pub max_bytes: u64,
    pub files: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: 10 << 20,
            files: 5,
        }
    }
}

/// The start time of process `pid` in clock ticks since boot, if it exists.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; fields follow the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Writes `value` as JSON to `dir/name`, atomically.
pub fn write_record<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(value).map_err(io::Error::other)?)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(name))
}

/// Reads the JSON record `dir/name`, if it is there.
pub fn read_record<T: for<'a> Deserialize<'a>>(dir: &Path, name: &str) -> Option<T> {
    let bytes = fs::read(dir.join(name)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.9fZ")
        .to_string()
}

/// The log file of one instance, shared by the stdout and stderr copiers.
struct Log {
    path: PathBuf,
    file: File,
    size: u64,
    rotation: Rotation,
}

impl Log {
    fn open(path: PathBuf, rotation: Rotation) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Log {
            path,
            file,
            size,
            rotation,
        })
    }

    fn write(&mut self, stream: &str, tag: char, text: &[u8]) -> io::Result<()> {
        let mut entry = format!("{} {stream} {tag} ", now()).into_bytes();
        entry.extend_from_slice(text);
        entry.push(b'\n');
        if self.size > 0 && self.size + entry.len() as u64 > self.rotation.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(&entry)?;
        self.size += entry.len() as u64;
        Ok(())
    }

    /// `log` becomes `log.1`, `log.1` becomes `log.2` …; the oldest beyond `files` goes.
    fn rotate(&mut self) -> io::Result<()> {
        let name = |i: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        let keep = self.rotation.files.max(1) - 1;
        if keep == 0 {
            self.file.set_len(0)?;
        } else {
            let _ = fs::remove_file(name(keep));
            for i in (1..keep).rev() {
                let _ = fs::rename(name(i), name(i + 1));
            }
            fs::rename(&self.path, name(1))?;
            self.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
        }
        self.size = 0;
        Ok(())
    }
}

/// Copies one stream into the log, a line (or a piece of a long line) per entry, and to
/// the attached clients as it comes.
fn copy(stream: &'static str, mut from: impl Read, log: Arc<Mutex<Log>>, clients: Arc<Clients>) {
    let id = if stream == "stderr" { 2 } else { 1 };
    let mut buf = vec![0u8; 32 * 1024];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let entry = |text: &[u8], tag: char| {
        // A full disk must not block the container on a full pipe: keep reading.
        let _ = log.lock().expect("log lock").write(stream, tag, text);
    };
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // EIO: every process holding the terminal is gone.
            Err(_) => break,
        };
        clients.send(id, &buf[..n]);
        let mut rest = &buf[..n];
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            line.extend_from_slice(&rest[..pos]);
            entry(&line, 'F');
            line.clear();
            rest = &rest[pos + 1..];
        }
        line.extend_from_slice(rest);
        while line.len() >= MAX_LINE {
            entry(&line[..MAX_LINE], 'P');
            line.drain(..MAX_LINE);
        }
    }
    if !line.is_empty() {
        entry(&line, 'P');
    }
}

/// Binds or connects to the socket `name` in `dir` through `/proc/self/fd`, so that a long
/// directory path stays within the 108 bytes a socket address holds.
pub fn in_dir<T>(dir: &Path, name: &str, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    let d = File::open(dir)?;
    f(&PathBuf::from(format!(
        "/proc/self/fd/{}/{name}",
        d.as_raw_fd()
    )))
}

/// One frame of the attach socket.
pub fn frame(stream: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + data.len());
    f.push(stream);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes());
    f.extend_from_slice(data);
    f
}

/// Reads one frame of the attach socket; `None` at its end.
fn read_frame(from: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match from.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut data = vec![0u8; len];
    from.read_exact(&mut data)?;
    Ok(Some((head[0], data)))
}

/// The attached clients' output queues.
#[derive(Default)]
struct Clients {
    queues: Mutex<Vec<SyncSender<Vec<u8>>>>,
    writers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Clients {
    /// Queues output for every client; one that does not keep up is dropped.
    fn send(&self, stream: u8, data: &[u8]) {
        let mut queues = self.queues.lock().expect("clients lock");
        if queues.is_empty() {
            return;
        }
        let f = frame(stream, data);
        queues.retain(|q| match q.try_send(f.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        });
    }

    fn add(&self, mut conn: UnixStream) {
        let (tx, rx) = sync_channel::<Vec<u8>>(CLIENT_QUEUE);
        let _ = conn.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
        let writer = std::thread::spawn(move || {
            for f in rx {
                if conn.write_all(&f).is_err() {
                    break;
                }
            }
            // Ends the reading side too, which holds a copy of the socket.
            let _ = conn.shutdown(std::net::Shutdown::Both);
        });
        self.queues.lock().expect("clients lock").push(tx);
        let mut writers = self.writers.lock().expect("clients lock");
        // Those of clients gone are let go (a thread's resources go with its handle).
        writers.retain(|w| !w.is_finished());
        writers.push(writer);
    }

    /// Ends every client once what is queued for it is written.
    fn finish(&self) {
        self.queues.lock().expect("clients lock").clear();
        let writers = std::mem::take(&mut *self.writers.lock().expect("clients lock"));
        for w in writers {
            let _ = w.join();
        }
    }
}

/// Where attached clients' input goes: the container's stdin pipe or its terminal.
struct Stdin {
    to: Mutex<Option<File>>,
    /// The terminal, for resizes and the end of input.
    tty: Option<OwnedFd>,
    once: bool,
    line_open: Mutex<bool>,
}

impl Stdin {
    fn write(&self, data: &[u8]) {
        let mut to = self.to.lock().expect("stdin lock");
        if let Some(w) = to.as_mut() {
            if w.write_all(data).is_err() {
                to.take();
            } else if let Some(&last) = data.last() {
                *self.line_open.lock().expect("stdin lock") = !matches!(last, b'\n' | b'\r');
            }
        }
    }

    /// A client's stdin ended: with `stdinOnce`, so does the container's.
    fn client_done(&self) {
        if !self.once {
            return;
        }
        let mut to = self.to.lock().expect("stdin lock");
        if let (Some(tty), Some(w)) = (&self.tty, to.as_mut()) {
            let open = *self.line_open.lock().expect("stdin lock");
            if let Ok(Some(eof)) = pty::end_of_input(tty, open) {
                let _ = w.write_all(&eof);
            }
        }
        to.take();
    }

    fn resize(&self, data: &[u8]) {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Size {
            width: u16,
            height: u16,
        }
        if let (Some(tty), Ok(s)) = (&self.tty, serde_json::from_slice::<Size>(data)) {
            let _ = pty::set_size(tty, s.width, s.height);
        }
    }
}

/// Serves attach clients on `listener` until the shim ends.
fn serve_attach(listener: UnixListener, clients: Arc<Clients>, stdin: Option<Arc<Stdin>>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Ok(output) = conn.try_clone() else {
            continue;
        };
        clients.add(output);
        let stdin = stdin.clone();
        std::thread::spawn(move || {
            let mut conn = conn;
            let mut open = true;
            while let Ok(Some((stream, data))) = read_frame(&mut conn) {
                let Some(stdin) = &stdin else { continue };
                match stream {
                    0 if open => stdin.write(&data),
                    4 => stdin.resize(&data),
                    255 if open => {
                        open = false;
                        stdin.client_done();
                    }
                    _ => {}
                }
            }
            if let (Some(stdin), true) = (&stdin, open) {
                stdin.client_done();
            }
        });
    }
}

/// Runs `argv` as the container of the instance directory `dir`, writing one line to
/// `ready` once it runs; returns the shim's own exit code (0 when it recorded an exit,
/// whatever the container's code was).
///
/// This runs inside a process that has other children (tests): only what stays in the
/// container's process group is ended with it. `berth shim` itself uses [`run_process`].
pub fn run(
    dir: &Path,
    argv: &[String],
    rotation: Rotation,
    stdio: super::Stdio,
    ready: &mut dyn Write,
) -> i32 {
    report(dir, supervise(dir, argv, rotation, stdio, ready, false))
}

/// As [`run`], as the whole of this process (`berth shim`): the shim becomes a child
/// subreaper, so whatever the container starts stays below it even when it leaves the
/// container's process group, and all of it ends when the container's first process
/// does, as in a container whose init exits.
pub fn run_process(
    dir: &Path,
    argv: &[String],
    rotation: Rotation,
    stdio: super::Stdio,
    ready: &mut dyn Write,
) -> i32 {
    report(dir, supervise(dir, argv, rotation, stdio, ready, true))
}

fn report(dir: &Path, outcome: io::Result<()>) -> i32 {
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth shim {}: {e}", dir.display());
            1
        }
    }
}

/// How long what a container left running may take to end after it.
const LEFTOVER_LIMIT: Duration = Duration::from_secs(10);

/// Waits for the child `pid`, reaping whatever else ends below this process meanwhile
/// (orphans this subreaper adopted).
fn wait_reaping(pid: i32) -> io::Result<std::process::ExitStatus> {
    use rustix::process::{WaitOptions, wait};
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((p, status))) if p.as_raw_nonzero().get() == pid => {
                return Ok(std::process::ExitStatus::from_raw(status.as_raw()));
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io::Error::other(format!("wait for the container: {e}"))),
        }
    }
}

/// Ends what the container `pid` left running: its process group and, when the shim is a
/// subreaper (`below_shim`), everything below the shim, which is then reaped.
fn end_leftovers(pid: i32, below_shim: bool) {
    let me = std::process::id() as i32;
    super::reset::end(
        |procs| {
            let group = procs.iter().filter(|p| p.pgid == pid).map(|p| p.pid);
            let mut set = match below_shim {
                true => super::reset::with_descendants(procs, group.chain([me])),
                false => super::reset::with_descendants(procs, group),
            };
            set.remove(&me);
            set
        },
        LEFTOVER_LIMIT,
    );
    if below_shim {
        use rustix::process::{WaitOptions, wait};
        while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
    }
}

fn supervise(
    dir: &Path,
    argv: &[String],
    rotation: Rotation,
    stdio: super::Stdio,
    ready: &mut dyn Write,
    own_process: bool,
) -> io::Result<()> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::other("no command to run"));
    };
    if own_process && let Err(e) = rustix::process::set_child_subreaper(Some(Pid::INIT)) {
        eprintln!(
            "berth shim {}: become a child subreaper: {e}",
            dir.display()
        );
    }
    let setup = match dir.join(MOUNTS_FILE).exists() {
        true => Some(
            read_record::<MountSetup>(dir, MOUNTS_FILE)
                .ok_or_else(|| io::Error::other(format!("unreadable {MOUNTS_FILE} record")))?,
        ),
        false => None,
    };
    // With volumes, the instance directory is reached through the working directory, so
    // a volume mounted over a path above it cannot hide it from the shim.
    let dir = match &setup {
        Some(_) => {
            std::env::set_current_dir(dir)?;
            Path::new(".")
        }
        None => dir,
    };
    let log = Arc::new(Mutex::new(Log::open(dir.join(LOG_FILE), rotation)?));
    let cgroups: Option<Placement> = read_record(dir, CGROUP_FILE);
    let cannot_run = |error: String| Exit {
        exit_code: 128,
        signal: None,
        finished_at: now(),
        error: Some(error),
        reason: None,
        message: None,
    };
    // The exit is recorded, then the instance's cgroups go (nothing runs in them now).
    let finish = |exit: &Exit| {
        let written = write_record(dir, EXIT_FILE, exit);
        if let Some(c) = &cgroups {
            c.remove();
        }
        written
    };
    let rootfs: Option<super::oci::RootfsSetup> = match dir.join(super::oci::ROOTFS_FILE).exists() {
        true => Some(read_record(dir, super::oci::ROOTFS_FILE).ok_or_else(|| {
            io::Error::other(format!("unreadable {} record", super::oci::ROOTFS_FILE))
        })?),
        false => None,
    };
    if let Some(rootfs) = &rootfs {
        // The root filesystem is mounted in a mount namespace of the shim's own: it goes
        // when the shim and the container are gone, however they end.
        if let Err(e) = enter_mounts(&[]).and_then(|()| super::oci::mount_rootfs(rootfs)) {
            return finish(&cannot_run(e.to_string()));
        }
    }
    if let Some(join) = read_record::<Join>(dir, JOIN_FILE)
        && let Err(e) = join_sandbox(&join)
    {
        return finish(&cannot_run(e.to_string()));
    }
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(setup) = &setup {
        if let Err(e) = enter_mounts(&setup.mounts) {
            return finish(&cannot_run(e.to_string()));
        }
        // Entered after the mounts: it may lie in a volume.
        cmd.current_dir(setup.working_dir.as_deref().unwrap_or(Path::new("/")));
    }
    let terminal = if stdio.tty {
        let pty = pty::open()?;
        // A session of its own is a process group of its own too.
        pty::run_on(&mut cmd, &pty.slave)?;
        Some(pty)
    } else {
        cmd.process_group(0)
            .stdin(if stdio.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        None
    };
    // runc places a container of an image itself (below the container's cgroups), and
    // stays out of them.
    let enter = cgroups.as_ref().filter(|_| rootfs.is_none());
    if let Some(Err(e)) = enter.map(Placement::enter) {
        leave_cgroups(cgroups.as_ref());
        return finish(&cannot_run(format!("enter the container's cgroups: {e}")));
    }
    let spawned = cmd.spawn();
    leave_cgroups(enter);
    // The command holds copies of the terminal side; the terminal must end with the
    // container, so they go now.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return finish(&cannot_run(format!("exec {program:?}: {e}"))),
    };
    let pid = child.id() as i32;
    let started = Started {
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        started_at: now(),
    };
    write_record(dir, PID_FILE, &started)?;
    let clients = Arc::new(Clients::default());
    let mut copiers = Vec::new();
    let mut copy_from = |stream: &'static str, from: Box<dyn Read + Send>| {
        let (log, clients) = (log.clone(), clients.clone());
        copiers.push(std::thread::spawn(move || copy(stream, from, log, clients)));
    };
    let stdin = match terminal {
        Some(pty) => {
            drop(pty.slave);
            copy_from("stdout", Box::new(File::from(pty.master.try_clone()?)));
            Some(Stdin {
                to: Mutex::new(
                    stdio
                        .stdin
                        .then(|| pty.master.try_clone())
                        .transpose()?
                        .map(File::from),
                ),
                tty: Some(pty.master),
                once: stdio.stdin_once,
                line_open: Mutex::new(false),
            })
        }
        None => {
            copy_from("stdout", Box::new(child.stdout.take().expect("piped")));
            copy_from("stderr", Box::new(child.stderr.take().expect("piped")));
            child.stdin.take().map(|w| Stdin {
                to: Mutex::new(Some(File::from(OwnedFd::from(w)))),
                tty: None,
                once: stdio.stdin_once,
                line_open: Mutex::new(false),
            })
        }
    };
    let socket = dir.join(ATTACH_SOCKET);
    let _ = fs::remove_file(&socket);
    // Held here too: the terminal must stay open while the container runs.
    let stdin = stdin.map(Arc::new);
    match in_dir(dir, ATTACH_SOCKET, |p| UnixListener::bind(p)) {
        Ok(listener) => {
            let (clients, stdin) = (clients.clone(), stdin.clone());
            std::thread::spawn(move || serve_attach(listener, clients, stdin));
        }
        Err(e) => eprintln!("berth shim {}: serve attach: {e}", dir.display()),
    }
    // Tell berth the container runs (it waits for this line, or for the end of stdout).
    let _ = writeln!(ready, "started {pid}").and_then(|()| ready.flush());
    let status = match own_process {
        true => wait_reaping(pid)?,
        false => child.wait()?,
    };
    end_leftovers(pid, own_process);
    if let Some(rootfs) = &rootfs {
        // runc's state and cgroups of the container go too, even when runc was killed.
        super::oci::clean_up(rootfs);
    }
    for c in copiers {
        let _ = c.join();
    }
    let _ = fs::remove_file(&socket);
    clients.finish();
    let _ = log.lock().expect("log lock").file.sync_all();
    // As a shell reports it: 128 + the signal for a killed process.
    let exit_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let exit = Exit {
        exit_code,
        message: termination_message(dir, exit_code),
        signal: status.signal(),
        finished_at: now(),
        error: None,
        reason: cgroups
            .as_ref()
            .is_some_and(|c| {
                c.oom_killed()
                    || (exit_code == 128 + 9 && rootfs.is_some() && c.killed_for_memory())
            })
            .then(|| "OOMKilled".to_string()),
    };
    finish(&exit)
}

/// The shim entered the container's cgroups only to start it there (a child is born in
/// its parent's cgroups, so the container is limited from its first instruction); it
/// leaves them at once, so it is neither charged for the container nor a candidate of
/// the OOM killer when the container runs out of memory.
fn leave_cgroups(cgroups: Option<&Placement>) {
    if let Some(Err(e)) = cgroups.map(Placement::leave) {
        eprintln!("berth shim: leave the container's cgroups: {e}");
    }
}

/// Moves this (single-threaded) process into a mount namespace of its own in which every
/// mount is private and `mounts` are bind-mounted, read-only where asked. A mount point the
/// host lacks is made in that namespace only ([`super::mountpoint`]), which may give this
/// process another root (a tmpfs over `/`); its working directory is kept.
pub fn enter_mounts(mounts: &[Mount]) -> io::Result<()> {
    use rustix::mount::{
        MountFlags, MountPropagationFlags, mount_bind_recursive, mount_change, mount_remount,
    };
    let fail = |what: String| move |e: rustix::io::Errno| io::Error::other(format!("{what}: {e}"));
    // SAFETY: the flags hold no CLONE_FILES, so no file descriptor table is unshared; the
    // shim has started no thread yet (unsharing a mount namespace needs a single thread).
    #[allow(unsafe_code)]
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
        .map_err(fail("unshare the mount namespace".into()))?;
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(fail("make the mounts private".into()))?;
    // Every source is held open before anything is mounted, so a volume mounted over a
    // path above another volume's source cannot hide that source.
    let mut held = Vec::with_capacity(mounts.len());
    for m in mounts {
        let fd = rustix::fs::open(
            &m.source,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(fail(format!("open {}", m.source.display())))?;
        held.push((fd, m));
    }
    // Outer paths first, so a volume inside another one lands on top of it.
    held.sort_by_key(|(_, m)| m.target.components().count());
    let mut points = super::mountpoint::MountPoints::default();
    for (fd, m) in &held {
        use std::os::fd::AsRawFd;
        let src = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        let dst = &m.target;
        fs::metadata(&src)
            .and_then(|source| points.make(dst, source.is_dir()))
            .map_err(|e| io::Error::other(format!("create mount point {}: {e}", dst.display())))?;
        mount_bind_recursive(&src, dst).map_err(fail(format!(
            "bind-mount {} at {}",
            m.source.display(),
            dst.display()
        )))?;
        points.mounted(dst);
        if m.read_only {
            // A remount keeps only the flags it names: keep the ones the mount had.
            let had = rustix::fs::statvfs(dst)
                .map(|s| MountFlags::from_bits_truncate(s.f_flag.bits() as _))
                .unwrap_or(MountFlags::empty());
            let keep = had
                & (MountFlags::NOSUID
                    | MountFlags::NODEV
                    | MountFlags::NOEXEC
                    | MountFlags::NOATIME
                    | MountFlags::NODIRATIME
                    | MountFlags::RELATIME);
            mount_remount(dst, MountFlags::BIND | MountFlags::RDONLY | keep, "")
                .map_err(fail(format!("make {} read-only", dst.display())))?;
        }
    }
    points.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_runs_logs_and_its_exit_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = ["sh", "-c", "echo out; echo err >&2; printf partial; exit 3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(run_plain(dir.path(), &argv), 0);
        let exit: Exit = read_record(dir.path(), EXIT_FILE).unwrap();
        assert_eq!((exit.exit_code, exit.signal), (3, None));
        let started: Started = read_record(dir.path(), PID_FILE).unwrap();
        assert!(started.pid > 0);
        let log = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        let entries: Vec<(&str, &str, &str)> = log
            .lines()
            .map(|l| {
                let mut p = l.splitn(4, ' ');
                let _time = p.next().unwrap();
                (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
            })
            .collect();
        assert!(entries.contains(&("stdout", "F", "out")), "{log}");
        assert!(entries.contains(&("stderr", "F", "err")), "{log}");
        assert!(entries.contains(&("stdout", "P", "partial")), "{log}");
    }

    /// Runs `argv` as a container without stdin or terminal, with the default rotation.
    fn run_plain(dir: &Path, argv: &[String]) -> i32 {
        run(
            dir,
            argv,
            Rotation::default(),
            Default::default(),
            &mut io::sink(),
        )
    }

    #[test]
    fn a_command_that_cannot_start_is_recorded_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/nonexistent/program".to_string()];
        assert_eq!(run_plain(dir.path(), &argv), 0);
        let exit: Exit = read_record(dir.path(), EXIT_FILE).unwrap();
        assert_eq!(exit.exit_code, 128);
        assert!(exit.error.unwrap().contains("/nonexistent/program"));
    }

    #[test]
    fn logs_rotate_by_size_and_keep_a_bounded_number_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = [
            "sh",
            "-c",
            "i=0; while [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rotation = Rotation {
            max_bytes: 1000,
            files: 3,
        };
        assert_eq!(
            run(
                dir.path(),
                &argv,
                rotation,
                Default::default(),
                &mut io::sink()
            ),
            0
        );
        let log = dir.path().join(LOG_FILE);
        assert!(fs::metadata(&log).unwrap().len() <= 1000);
        assert!(dir.path().join("log.1").exists());
        assert!(dir.path().join("log.2").exists());
        assert!(!dir.path().join("log.3").exists());
        let last = fs::read_to_string(&log).unwrap();
        assert!(last.contains("line-199"), "{last}");
    }

    fn placement(root: &Path) -> Placement {
        let (dir, home) = (root.join("pod/c-0"), root.join("home"));
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(&home).unwrap();
        Placement {
            dirs: vec![dir.clone()],
            home: vec![home],
            memory: (dir, super::super::cgroup::Version::V2),
            others: Vec::new(),
        }
    }

    #[test]
    fn the_shim_starts_the_container_in_its_cgroups_and_reports_an_oom_kill() {
        // A fake cgroup tree: joining one is writing a pid to its cgroup.procs.
        let dir = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let p = placement(tree.path());
        fs::write(p.dirs[0].join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        write_record(dir.path(), CGROUP_FILE, &p).unwrap();
        let argv = vec!["sh".to_string(), "-c".to_string(), "kill -9 $$".to_string()];
        assert_eq!(run_plain(dir.path(), &argv), 0);
        let me = std::process::id().to_string();
        let procs = |d: &Path| fs::read_to_string(d.join("cgroup.procs")).unwrap();
        assert_eq!(procs(&p.dirs[0]), me, "entered before the spawn");
        assert_eq!(procs(&p.home[0]), me, "and left after it");
        let exit: Exit = read_record(dir.path(), EXIT_FILE).unwrap();
        assert_eq!((exit.exit_code, exit.signal), (137, Some(9)));
        assert_eq!(exit.reason.as_deref(), Some("OOMKilled"));
    }

    #[test]
    fn a_container_whose_cgroups_cannot_be_entered_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let mut p = placement(tree.path());
        p.dirs = vec![tree.path().join("gone")];
        write_record(dir.path(), CGROUP_FILE, &p).unwrap();
        let marker = dir.path().join("ran");
        let argv = vec!["touch".to_string(), marker.display().to_string()];
        assert_eq!(run_plain(dir.path(), &argv), 0);
        let exit: Exit = read_record(dir.path(), EXIT_FILE).unwrap();
        assert_eq!(exit.exit_code, 128);
        let error = exit.error.unwrap();
        assert!(
            error.starts_with("enter the container's cgroups: "),
            "{error}"
        );
        assert!(!marker.exists());
        assert_eq!(exit.reason, None);
    }

    /// Tells the test when the shim says its container runs.
    struct Ready(std::sync::mpsc::Sender<()>);

    impl Write for Ready {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            let _ = self.0.send(());
            Ok(())
        }
    }

    /// Starts a shim on a thread; returns once its container runs.
    fn shim(
        dir: &Path,
        script: &str,
        stdio: crate::runtime::Stdio,
    ) -> std::thread::JoinHandle<i32> {
        let argv: Vec<String> = vec!["sh".into(), "-c".into(), script.into()];
        let dir = dir.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        let shim = std::thread::spawn(move || {
            run(&dir, &argv, Rotation::default(), stdio, &mut Ready(tx))
        });
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        shim
    }

    /// Reads frames until the socket ends; returns what came on `stream`.
    fn read_all(conn: &mut UnixStream, stream: u8) -> String {
        let mut out = Vec::new();
        while let Some((s, d)) = read_frame(conn).unwrap() {
            if s == stream {
                out.extend(d);
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn an_attached_client_types_into_the_containers_terminal_and_resizes_it() {
        let dir = tempfile::tempdir().unwrap();
        let stdio = crate::runtime::Stdio {
            stdin: true,
            stdin_once: false,
            tty: true,
        };
        let shim = shim(
            dir.path(),
            "read line; tty; stty size; echo got-$line; exit 2",
            stdio,
        );
        let mut conn = in_dir(dir.path(), ATTACH_SOCKET, |p| UnixStream::connect(p)).unwrap();
        conn.write_all(&frame(4, br#"{"Width":33,"Height":7}"#))
            .unwrap();
        conn.write_all(&frame(0, b"hello\n")).unwrap();
        let out = read_all(&mut conn, 1);
        assert!(out.contains("/dev/pts/"), "{out}");
        assert!(out.contains("7 33"), "{out}");
        assert!(out.contains("got-hello"), "{out}");
        assert_eq!(shim.join().unwrap(), 0);
        let exit: Exit = read_record(dir.path(), EXIT_FILE).unwrap();
        assert_eq!(exit.exit_code, 2);
        let log = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(log.contains(" stdout F got-hello"), "{log}");
        assert!(!dir.path().join(ATTACH_SOCKET).exists());
    }

    #[test]
    fn with_stdin_once_the_containers_stdin_closes_when_the_client_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let stdio = crate::runtime::Stdio {
            stdin: true,
            stdin_once: true,
            tty: false,
        };
        let shim = shim(dir.path(), "cat; echo stdin-closed >&2", stdio);
        let mut conn = in_dir(dir.path(), ATTACH_SOCKET, |p| UnixStream::connect(p)).unwrap();
        conn.write_all(&frame(0, b"abc\n")).unwrap();
        let mut echoed = Vec::new();
        while !echoed.ends_with(b"abc\n") {
            let (stream, data) = read_frame(&mut conn).unwrap().unwrap();
            assert_eq!(stream, 1);
            echoed.extend(data);
        }
        drop(conn);
        assert_eq!(shim.join().unwrap(), 0);
        let log = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(log.contains(" stdout F abc"), "{log}");
        assert!(log.contains(" stderr F stdin-closed"), "{log}");
    }

    #[test]
    fn start_ticks_tell_processes_apart() {
        let me = std::process::id() as i32;
        assert!(start_ticks(me).is_some());
        assert_eq!(start_ticks(i32::MAX), None);
    }
}
