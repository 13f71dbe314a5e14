//! `pods/{name}/exec` and `pods/{name}/attach` over WebSocket, as kubectl speaks them:
//! each frame's first byte is the stream (0 stdin, 1 stdout, 2 stderr, 3 the final
//! `Status`, 4 terminal resize `{"Width":w,"Height":h}`; with `v5.channel.k8s.io`, 255
//! closes a stream). The protocols served are `v5.channel.k8s.io`, `v4.channel.k8s.io`,
//! `v4.base64.channel.k8s.io` and the older `channel.k8s.io` and `base64.channel.k8s.io`
//! (base64 ones send text frames: the stream as an ASCII digit, then the data in base64;
//! the older ones send only a failure's message on stream 3, nothing on success). The
//! client's first offer that is served wins, as in Kubernetes.
//!
//! The command runs in the container's environment and working directory on this
//! process's node, in a process group of its own; with `tty` on a pseudo-terminal
//! ([`crate::runtime::pty`]) as a session leader, stderr merged into stdout. When the
//! client goes away before the command ends, its process group is killed.
//!
//! `pods/{name}/attach` speaks the same protocols to the container's main process,
//! through the attach socket of its shim ([`crate::runtime::shim`]): output from then on,
//! input when the container keeps a stdin, resizes when it has a terminal; the session
//! ends (with `Success`) when the container does.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::error::Error;
use crate::runtime::{pty, shim};

/// How long the output a command left on its terminal may take to be read once it ended
/// (a process it left behind may hold the terminal open for good).
const TTY_DRAIN: Duration = Duration::from_millis(200);

/// A WebSocket stream protocol of the `channel.k8s.io` family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V5,
    V4,
    V4Base64,
    V1,
    V1Base64,
}

impl Protocol {
    /// Every protocol served, by name.
    pub const SERVED: [(&'static str, Protocol); 5] = [
        ("v5.channel.k8s.io", Protocol::V5),
        ("v4.channel.k8s.io", Protocol::V4),
        ("v4.base64.channel.k8s.io", Protocol::V4Base64),
        ("channel.k8s.io", Protocol::V1),
        ("base64.channel.k8s.io", Protocol::V1Base64),
    ];

    pub fn name(self) -> &'static str {
        Self::SERVED
            .iter()
            .find(|(_, p)| *p == self)
            .map(|(n, _)| *n)
            .expect("every protocol is served")
    }

    /// The client's first offer that is served; `channel.k8s.io` when it offers none.
    pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> Result<Protocol, Error> {
        let offered: Vec<&str> = offered
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        if offered.is_empty() {
            return Ok(Protocol::V1);
        }
        offered
            .iter()
            .find_map(|o| Self::SERVED.iter().find(|(n, _)| n == o).map(|(_, p)| *p))
            .ok_or_else(|| {
                Error::BadRequest(format!(
                    "requested protocol(s) are not supported: [{}]; supports [{}]",
                    offered.join(" "),
                    Self::SERVED.map(|(n, _)| n).join(" ")
                ))
            })
    }

    fn base64(self) -> bool {
        matches!(self, Protocol::V4Base64 | Protocol::V1Base64)
    }

    /// A frame carrying `data` on `stream`.
    pub fn frame(self, stream: u8, data: &[u8]) -> Message {
        if self.base64() {
            let mut text = String::with_capacity(1 + data.len() * 4 / 3 + 4);
            text.push(char::from(b'0' + stream));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::Text(text.into())
        } else {
            let mut frame = Vec::with_capacity(1 + data.len());
            frame.push(stream);
            frame.extend_from_slice(data);
            Message::Binary(Bytes::from(frame))
        }
    }

    /// The stream and data of a frame from the client, if it is one. Binary and text
    /// frames are read alike, as kube-apiserver reads them: the Python client sends its
    /// input as text (`chr(stream) + data`) whenever it is given a string.
    pub fn decode(self, msg: &Message) -> Option<(u8, Bytes)> {
        let bytes = match msg {
            Message::Binary(b) => b.clone(),
            Message::Text(t) => Bytes::copy_from_slice(t.as_str().as_bytes()),
            _ => return None,
        };
        let (&first, rest) = bytes.split_first()?;
        if self.base64() {
            let data = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            Some((first.checked_sub(b'0')?, Bytes::from(data)))
        } else {
            Some((first, bytes.slice(1..)))
        }
    }

    /// The frame that ends a session with `status`: the `Status` as JSON from v4 on, the
    /// message of a failure only before (and nothing on success).
    pub fn status(self, status: &Value) -> Option<Message> {
        match self {
            Protocol::V5 | Protocol::V4 | Protocol::V4Base64 => {
                Some(self.frame(STATUS, &serde_json::to_vec(status).expect("JSON")))
            }
            Protocol::V1 | Protocol::V1Base64 => (status["status"] != "Success").then(|| {
                self.frame(
                    STATUS,
                    status["message"].as_str().unwrap_or("error").as_bytes(),
                )
            }),
        }
    }
}

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const STATUS: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: "no more data on the stream in the payload".
pub const CLOSE: u8 = 255;

/// Where and how a container runs, for running a command beside it.
#[derive(Debug, Clone)]
pub struct ExecContext {
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// Where the command runs: inside the container.
    pub inside: crate::runtime::Inside,
}

/// The query of an exec or attach request (`command` repeats, so it is read as a list of
/// pairs).
#[derive(Debug, Default)]
pub struct Request {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Request {
    pub fn parse(raw: Option<&str>) -> Request {
        let mut r = Request::default();
        let yes = super::resources::truthy;
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "command" => r.command.push(v.into_owned()),
                "container" if !v.is_empty() => r.container = Some(v.into_owned()),
                "stdin" | "input" => r.stdin = yes(&v),
                "stdout" | "output" => r.stdout = yes(&v),
                "stderr" | "error" => r.stderr = yes(&v),
                "tty" => r.tty = yes(&v),
                _ => {}
            }
        }
        r
    }

    /// Kubernetes' checks of the streams asked for.
    pub fn check_streams(&self) -> Result<(), Error> {
        if !(self.stdin || self.stdout || self.stderr) {
            return Err(Error::BadRequest(
                "you must specify at least 1 of stdin, stdout, stderr".into(),
            ));
        }
        Ok(())
    }
}

/// The container an exec or attach is for: the one named, or the only one.
pub fn container(pod: &Value, asked: Option<&str>) -> Result<String, Error> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names = |key: &str| -> Vec<&str> {
        pod["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let (app, init) = (names("containers"), names("initContainers"));
    match asked {
        Some(c) if app.contains(&c) || init.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(Error::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if app.len() == 1 => Ok(app[0].to_string()),
        None if app.is_empty() => Err(Error::BadRequest(format!("pod {name} has no containers"))),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                app.join(" ")
            );
            if !init.is_empty() {
                message.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            Err(Error::BadRequest(message))
        }
    }
}

/// One command to run: what, where, and which streams.
#[derive(Debug, Clone)]
pub struct Session {
    pub argv: Vec<String>,
    pub ctx: ExecContext,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Session {
    pub fn new(req: Request, ctx: ExecContext) -> Self {
        Session {
            argv: req.command,
            ctx,
            stdin: req.stdin,
            stdout: req.stdout,
            // With a terminal, stderr is stdout (Kubernetes ignores the flag then).
            stderr: req.stderr && !req.tty,
            tty: req.tty,
        }
    }
}

/// A running container's attach socket (the directory that holds it) and how the
/// container runs.
#[derive(Debug, Clone)]
pub struct AttachTarget {
    pub dir: PathBuf,
    pub stdio: crate::runtime::Stdio,
}

/// One attach to a container's main process: which streams.
#[derive(Debug, Clone)]
pub struct Attach {
    pub dir: PathBuf,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Attach {
    /// Whether there is a terminal is the container's to say (as the kubelet does), and
    /// input goes nowhere unless the container keeps a stdin.
    pub fn new(req: &Request, target: AttachTarget) -> Self {
        let tty = target.stdio.tty;
        Attach {
            dir: target.dir,
            stdin: req.stdin && target.stdio.stdin,
            stdout: req.stdout,
            stderr: req.stderr && !tty,
            tty,
        }
    }
}

/// What a WebSocket session relays.
enum Job {
    Exec(Session),
    Attach(Attach),
}

impl Job {
    fn streams(&self) -> (bool, bool) {
        match self {
            Job::Exec(s) => (s.stdout, s.stderr),
            Job::Attach(a) => (a.stdout, a.stderr),
        }
    }
}

/// Upgrades to WebSocket with the protocol the client offers first and runs the session,
/// relaying its streams. The entry point for any route that serves exec.
/// A WebSocket upgrade with the subprotocols the client offered, in the client's order
/// (axum's extractor keeps them in a sorted set, which would make `v4` win over `v5`).
pub struct Upgrade {
    pub ws: WebSocketUpgrade,
    pub offered: Vec<String>,
}

impl Upgrade {
    /// Picks the protocol; sets it on the answer when the client offered any.
    pub fn negotiate(&mut self) -> Result<Protocol, Error> {
        let protocol = Protocol::negotiate(self.offered.iter().map(String::as_str))?;
        if !self.offered.is_empty() {
            self.ws
                .set_selected_protocol(axum::http::HeaderValue::from_static(protocol.name()));
        }
        Ok(protocol)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Upgrade {
    type Rejection = axum::extract::ws::rejection::WebSocketUpgradeRejection;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let offered = parts
            .headers
            .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let ws = WebSocketUpgrade::from_request_parts(parts, state).await?;
        Ok(Upgrade { ws, offered })
    }
}

pub fn serve(ws: Upgrade, session: Session) -> Response {
    upgrade(ws, Job::Exec(session))
}

/// As [`serve`], for an attach.
pub fn serve_attach(ws: Upgrade, attach: Attach) -> Response {
    upgrade(ws, Job::Attach(attach))
}

fn upgrade(mut ws: Upgrade, job: Job) -> Response {
    let protocol = match ws.negotiate() {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    ws.ws
        .on_upgrade(move |socket| run(socket, protocol, job))
        .into_response()
}

/// The final `Status` for a command that ended with `code`.
pub fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", argv.join(" ")),
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
    }
}

/// A failure that is not the command's exit code.
pub fn failure(message: String) -> Value {
    json!({
        "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
        "message": message,
    })
}

/// What the client's input goes to.
enum Input {
    /// Nothing reads it.
    Ignored,
    /// The command's stdin pipe, until the client closes it.
    Pipe(Option<tokio::process::ChildStdin>),
    /// The terminal: input is typed into it and resizes apply to it.
    Tty {
        master: Arc<pty::Master>,
        stdin: bool,
        /// Whether what was typed last is a line not yet ended.
        line_open: bool,
    },
    /// A container's attach socket: input and resizes are passed on as frames.
    Attach {
        conn: tokio::net::unix::OwnedWriteHalf,
        stdin: bool,
    },
}

impl Input {
    async fn write(&mut self, data: &[u8]) {
        match self {
            Input::Ignored => {}
            Input::Pipe(pipe) => {
                if let Some(w) = pipe.as_mut()
                    && w.write_all(data).await.is_err()
                {
                    // The command closed its stdin; what follows has no reader.
                    pipe.take();
                }
            }
            Input::Tty {
                master,
                stdin: true,
                line_open,
            } => {
                if let Some(&last) = data.last() {
                    *line_open = !matches!(last, b'\n' | b'\r');
                }
                let _ = master.write_all(data).await;
            }
            Input::Tty { .. } => {}
            Input::Attach { conn, stdin: true } => {
                let _ = conn.write_all(&shim::frame(STDIN, data)).await;
            }
            Input::Attach { .. } => {}
        }
    }

    async fn close(&mut self) {
        match self {
            Input::Ignored => {}
            Input::Attach { conn, stdin: true } => {
                let _ = conn.write_all(&shim::frame(CLOSE, &[])).await;
            }
            Input::Attach { .. } => {}
            Input::Pipe(pipe) => {
                pipe.take();
            }
            Input::Tty {
                master,
                stdin: true,
                line_open,
            } => match pty::end_of_input(master.fd(), *line_open) {
                Ok(Some(eof)) => {
                    let _ = master.write_all(&eof).await;
                    *line_open = false;
                }
                // A terminal in raw mode has no end of input; the program decides.
                Ok(None) => tracing::debug!("stdin closed on a raw terminal: nothing to send"),
                Err(e) => tracing::debug!(error = %e, "read the terminal's settings"),
            },
            Input::Tty { .. } => {}
        }
    }

    async fn resize(&mut self, data: &[u8]) {
        if let Input::Attach { conn, .. } = self {
            // The shim applies it to the container's terminal, if it has one.
            let _ = conn.write_all(&shim::frame(RESIZE, data)).await;
            return;
        }
        let Input::Tty { master, .. } = self else {
            return;
        };
        if let Some((width, height)) = parse_size(data)
            && let Err(e) = pty::set_size(master.fd(), width, height)
        {
            tracing::debug!(error = %e, "resize the terminal");
        }
    }
}

/// Reads the client's frames into `input` until the client goes away.
async fn read_input(
    mut incoming: SplitStream<WebSocket>,
    pending: Option<Message>,
    protocol: Protocol,
    mut input: Input,
) {
    let mut pending = pending;
    loop {
        let msg = match pending.take() {
            Some(m) => m,
            None => match incoming.next().await {
                Some(Ok(m)) => m,
                _ => return,
            },
        };
        if let Message::Close(_) = msg {
            return;
        }
        let Some((stream, data)) = protocol.decode(&msg) else {
            continue;
        };
        match stream {
            STDIN => input.write(&data).await,
            RESIZE => input.resize(&data).await,
            CLOSE if protocol == Protocol::V5 && data.first() == Some(&STDIN) => {
                input.close().await
            }
            _ => {}
        }
    }
}

/// Copies `from` onto `stream` until it ends.
fn pump(
    mut from: impl AsyncRead + Unpin + Send + 'static,
    stream: u8,
    to: mpsc::Sender<(u8, Bytes)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if to
                        .send((stream, Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    })
}

/// Copies the terminal onto stdout until every holder of it is gone, or a moment after
/// the command ended.
fn pump_tty(
    master: Arc<pty::Master>,
    mut ended: watch::Receiver<Option<i32>>,
    to: mpsc::Sender<(u8, Bytes)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut deadline = None;
        loop {
            let read = async {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, master.read(&mut buf))
                        .await
                        .unwrap_or(Ok(0)),
                    None => master.read(&mut buf).await,
                }
            };
            tokio::select! {
                got = read => match got {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if to.send((STDOUT, Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                            return;
                        }
                    }
                },
                _ = async { ended.wait_for(Option::is_some).await.map(|_| ()) }, if deadline.is_none() => {
                    deadline = Some(tokio::time::Instant::now() + TTY_DRAIN);
                }
            }
        }
    })
}

/// A started command or an attach: its output, its input, and its end.
struct Running {
    output: mpsc::Receiver<(u8, Bytes)>,
    input: Input,
    /// The exit code once it ended (0 for an attach, which ends with its container).
    ended: watch::Receiver<Option<i32>>,
    /// The command's process group, killed when the client leaves (none for an attach).
    pgid: Option<rustix::process::Pid>,
    /// Waits for the end.
    waiter: tokio::task::JoinHandle<()>,
}

fn start(session: &Session, size: Option<(u16, u16)>) -> std::io::Result<Running> {
    let (program, args) = session
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut cmd = session.ctx.inside.command(
        program,
        args,
        &session.ctx.env,
        session.ctx.working_dir.as_deref(),
        session.tty,
    )?;
    cmd.kill_on_drop(true);
    let (tx, output) = mpsc::channel(64);
    let (ended_tx, ended) = watch::channel(None);
    let null = std::process::Stdio::null;
    let piped = std::process::Stdio::piped;
    let (mut child, input) = if session.tty {
        let pty = pty::open()?;
        if let Some((width, height)) = size {
            pty::set_size(&pty.master, width, height)?;
        }
        pty::run_on(cmd.as_std_mut(), &pty.slave)?;
        let child = cmd.spawn()?;
        drop(pty.slave);
        let master = Arc::new(pty::Master::new(pty.master)?);
        pump_tty(master.clone(), ended.clone(), tx);
        let input = Input::Tty {
            master,
            stdin: session.stdin,
            line_open: false,
        };
        (child, input)
    } else {
        cmd.process_group(0)
            .stdin(if session.stdin { piped() } else { null() })
            .stdout(if session.stdout { piped() } else { null() })
            .stderr(if session.stderr { piped() } else { null() });
        let mut child = cmd.spawn()?;
        if let Some(out) = child.stdout.take() {
            pump(out, STDOUT, tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            pump(err, STDERR, tx);
        }
        let input = match child.stdin.take() {
            Some(w) => Input::Pipe(Some(w)),
            None => Input::Ignored,
        };
        (child, input)
    };
    let pgid = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32));
    let waiter = tokio::spawn(async move {
        use std::os::unix::process::ExitStatusExt;
        let code = match child.wait().await {
            Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            Err(_) => 128,
        };
        let _ = ended_tx.send(Some(code));
    });
    Ok(Running {
        output,
        input,
        ended,
        pgid,
        waiter,
    })
}

/// Connects to a container's attach socket: its output comes as frames until it ends.
async fn connect(attach: &Attach) -> std::io::Result<Running> {
    let dir = std::fs::File::open(&attach.dir)?;
    let path = format!("/proc/self/fd/{}/{}", dir.as_raw_fd(), shim::ATTACH_SOCKET);
    let conn = tokio::net::UnixStream::connect(path).await?;
    drop(dir);
    let (mut from, to) = conn.into_split();
    let (tx, output) = mpsc::channel(64);
    let (ended_tx, ended) = watch::channel(None);
    let (stdout, stderr) = (attach.stdout, attach.stderr);
    let waiter = tokio::spawn(async move {
        let mut head = [0u8; 5];
        while from.read_exact(&mut head).await.is_ok() {
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut data = vec![0u8; len];
            if from.read_exact(&mut data).await.is_err() {
                break;
            }
            let wanted = match head[0] {
                STDOUT => stdout,
                STDERR => stderr,
                _ => false,
            };
            if wanted && tx.send((head[0], Bytes::from(data))).await.is_err() {
                break;
            }
        }
        // The shim closes the socket when the container has ended.
        drop(tx);
        let _ = ended_tx.send(Some(0));
    });
    Ok(Running {
        output,
        input: Input::Attach {
            conn: to,
            stdin: attach.stdin,
        },
        ended,
        pgid: None,
        waiter,
    })
}

/// How long a terminal session waits for the client's first size before its command
/// starts: kubectl sends it right after the upgrade, and a command that reads its size at
/// once (`stty size`, a full-screen program) should find it there.
const FIRST_SIZE_WAIT: Duration = Duration::from_millis(200);

/// The client's first message when it is a terminal size (applied before the command
/// starts); any other first message is handed back to be read as input.
async fn first_size(
    incoming: &mut SplitStream<WebSocket>,
    protocol: Protocol,
) -> (Option<(u16, u16)>, Option<Message>) {
    let Ok(Some(Ok(msg))) = tokio::time::timeout(FIRST_SIZE_WAIT, incoming.next()).await else {
        return (None, None);
    };
    match protocol.decode(&msg) {
        Some((RESIZE, data)) => (parse_size(&data), None),
        _ => (None, Some(msg)),
    }
}

/// A `{"Width":w,"Height":h}` resize message.
fn parse_size(data: &[u8]) -> Option<(u16, u16)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Size {
        width: u16,
        height: u16,
    }
    match serde_json::from_slice::<Size>(data) {
        Ok(s) => Some((s.width, s.height)),
        Err(e) => {
            tracing::debug!(error = %e, "a resize message that is not a size");
            None
        }
    }
}

async fn run(socket: WebSocket, protocol: Protocol, job: Job) {
    let (mut sink, mut incoming) = socket.split();
    let (size, pending) = match &job {
        Job::Exec(session) if session.tty => first_size(&mut incoming, protocol).await,
        _ => (None, None),
    };
    let started = match &job {
        Job::Exec(session) => start(session, size).map_err(|e| {
            let program = session.argv.first().map(String::as_str).unwrap_or("");
            format!(
                "Internal error occurred: error executing command in container: exec {program:?}: {e}"
            )
        }),
        Job::Attach(attach) => connect(attach)
            .await
            .map_err(|e| format!("Internal error occurred: error attaching to container: {e}")),
    };
    let mut running = match started {
        Ok(r) => r,
        Err(message) => {
            let status = failure(message);
            if let Some(frame) = protocol.status(&status) {
                let _ = sink.send(frame).await;
            }
            let _ = sink.send(close()).await;
            return;
        }
    };
    // As the kubelet does: an empty frame on the first writable stream says "ready".
    let (stdout, stderr) = job.streams();
    let first = if stdout {
        STDOUT
    } else if stderr {
        STDERR
    } else {
        STATUS
    };
    let _ = sink.send(protocol.frame(first, &[])).await;
    let input = std::mem::replace(&mut running.input, Input::Ignored);
    let mut client = tokio::spawn(read_input(incoming, pending, protocol, input));
    let code = relay(&mut sink, protocol, &mut running, &mut client).await;
    client.abort();
    let Some(code) = code else {
        // The client went away first: nobody will see the command's end.
        if let Some(pgid) = running.pgid {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        running.waiter.abort();
        return;
    };
    let argv = match &job {
        Job::Exec(session) => &session.argv[..],
        Job::Attach(_) => &[],
    };
    if let Some(frame) = protocol.status(&exit_status(argv, code)) {
        let _ = sink.send(frame).await;
    }
    let _ = sink.send(close()).await;
}

/// Sends the output until it ends, then waits for the exit code; `None` when the client
/// goes away before.
async fn relay(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    protocol: Protocol,
    running: &mut Running,
    client: &mut tokio::task::JoinHandle<()>,
) -> Option<i32> {
    loop {
        tokio::select! {
            frame = running.output.recv() => match frame {
                Some((stream, data)) => {
                    if sink.send(protocol.frame(stream, &data)).await.is_err() {
                        return None;
                    }
                }
                None => break,
            },
            _ = &mut *client => return None,
        }
    }
    tokio::select! {
        code = running.ended.wait_for(Option::is_some) => code.ok().and_then(|c| *c),
        _ = &mut *client => None,
    }
}

fn close() -> Message {
    Message::Close(Some(CloseFrame {
        code: 1000,
        reason: "".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_commands_keep_their_order_and_decode() {
        let r = Request::parse(Some(
            "command=sh&command=-c&command=echo%20hi%3Bexit+3&container=main&stdin=true&stdout=true",
        ));
        assert_eq!(r.command, ["sh", "-c", "echo hi;exit 3"]);
        assert_eq!(r.container.as_deref(), Some("main"));
        assert!(r.stdin && r.stdout && !r.stderr && !r.tty);
        assert!(r.check_streams().is_ok());
        assert!(
            Request::parse(Some("command=true"))
                .check_streams()
                .is_err()
        );
    }

    #[test]
    fn the_container_is_the_one_named_or_the_only_one() {
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(container(&pod, Some("b")).unwrap(), "b");
        assert_eq!(container(&pod, Some("i")).unwrap(), "i");
        assert!(container(&pod, Some("c")).is_err());
        let Err(Error::BadRequest(m)) = container(&pod, None) else {
            panic!("two containers need a name");
        };
        assert_eq!(
            m,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        let one =
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        assert_eq!(container(&one, None).unwrap(), "a");
    }

    #[test]
    fn the_clients_first_served_offer_wins() {
        let p = Protocol::negotiate(["v4.channel.k8s.io, v5.channel.k8s.io"]).unwrap();
        assert_eq!(p, Protocol::V4);
        let p = Protocol::negotiate(["x.example", "base64.channel.k8s.io"]).unwrap();
        assert_eq!(p, Protocol::V1Base64);
        assert_eq!(Protocol::negotiate([]).unwrap(), Protocol::V1);
        let Err(Error::BadRequest(m)) = Protocol::negotiate(["v9.channel.k8s.io"]) else {
            panic!("an unknown protocol is refused");
        };
        assert!(
            m.contains("v9.channel.k8s.io") && m.contains("v5.channel.k8s.io"),
            "{m}"
        );
    }

    #[test]
    fn frames_round_trip_in_binary_and_base64() {
        for p in Protocol::SERVED.map(|(_, p)| p) {
            let frame = p.frame(STDIN, b"hi\x00\xff");
            assert_eq!(
                p.decode(&frame),
                Some((STDIN, Bytes::from_static(b"hi\x00\xff")))
            );
        }
        assert_eq!(
            Protocol::V4Base64.frame(STDOUT, b"hello"),
            Message::Text("1aGVsbG8=".into())
        );
        assert_eq!(
            Protocol::V4.frame(STDERR, b"x"),
            Message::Binary(Bytes::from_static(b"\x02x"))
        );
    }

    #[test]
    fn text_frames_carry_input_like_binary_ones() {
        // The Python client's stdin and resizes: `chr(stream) + data` as text.
        assert_eq!(
            Protocol::V4.decode(&Message::Text("\u{0}ls -l\n".into())),
            Some((STDIN, Bytes::from_static(b"ls -l\n")))
        );
        assert_eq!(
            Protocol::V5.decode(&Message::Text("\u{4}{\"Width\":80,\"Height\":24}".into())),
            Some((RESIZE, Bytes::from_static(b"{\"Width\":80,\"Height\":24}")))
        );
        // And a base64 protocol's frame may come binary.
        assert_eq!(
            Protocol::V4Base64.decode(&Message::Binary(Bytes::from_static(b"0aGk="))),
            Some((STDIN, Bytes::from_static(b"hi")))
        );
        assert_eq!(Protocol::V4.decode(&Message::Text("".into())), None);
    }

    #[test]
    fn older_protocols_send_only_a_failures_message() {
        let ok = exit_status(&["true".into()], 0);
        let bad = exit_status(&["false".into()], 1);
        assert_eq!(Protocol::V1.status(&ok), None);
        let Some(Message::Binary(b)) = Protocol::V1.status(&bad) else {
            panic!("a failure is sent");
        };
        assert!(b.starts_with(b"\x03command terminated with non-zero exit code"));
        let Some(Message::Binary(b)) = Protocol::V4.status(&ok) else {
            panic!("success is sent");
        };
        assert_eq!(&b[..], b"\x03{\"metadata\":{},\"status\":\"Success\"}");
    }
}
