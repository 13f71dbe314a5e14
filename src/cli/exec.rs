//! `exec [-i] [-t] [-c C] POD -- COMMAND...`: runs a command in a container over the
//! `pods/exec` WebSocket (`v5.channel.k8s.io`), with the local terminal in raw mode and
//! its size followed when `-t`, and the command's exit code passed through.

use std::io::Write;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::client::{Kind, catalog};

use super::resource::resolve;
use super::{CliError, Conn};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ExecArgs {
    /// `POD` or `TYPE/NAME` (`rc/NAME` picks one of its pods).
    pub target: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    /// Pass standard input to the command.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Run the command on a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The container (default: the pod's default container or its first).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Do not print `Unable to use a TTY` and other notices.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Puts the terminal in raw mode and restores it when dropped.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

fn terminal_size() -> Option<Value> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (size.ws_col > 0).then(|| json!({"Width": size.ws_col, "Height": size.ws_row}))
}

/// The exit code a `Status` on the error channel stands for, or the error it reports.
fn exit_code(status: &Value) -> Result<i32, CliError> {
    if status["status"] == "Success" {
        return Ok(0);
    }
    if status["reason"] == "NonZeroExitCode"
        && let Some(code) = status["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str())
            .and_then(|m| m.parse().ok())
    {
        return Ok(code);
    }
    Err(CliError::msg(
        status["message"]
            .as_str()
            .unwrap_or("the command failed")
            .to_string(),
    ))
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

async fn connect(conn: &Conn, path_and_query: &str) -> Result<(Socket, bool), CliError> {
    let url = format!(
        "{}{path_and_query}",
        conn.server.replacen("https://", "wss://", 1)
    );
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        CliError::msg(format!("cannot {what} {}: {e}", conn.server))
    };
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| fail("build an exec request for", &e))?;
    let headers = req.headers_mut();
    if !conn.token.is_empty() {
        headers.insert(
            "Authorization",
            format!("Bearer {}", conn.token)
                .parse()
                .map_err(|e| fail("use the token for", &e))?,
        );
    }
    headers.insert(
        "Sec-WebSocket-Protocol",
        "v5.channel.k8s.io, v4.channel.k8s.io"
            .parse()
            .expect("a valid header"),
    );
    let host = req.uri().host().unwrap_or_default().to_string();
    let port = req.uri().port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| fail("connect to", &e))?;
    let mut tls = crate::client::tls_config(&conn.ca_pem).map_err(|e| fail("trust", &e))?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| fail("name", &e))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| fail("connect securely to", &e))?;
    let (ws, resp) = match tokio_tungstenite::client_async(req, stream).await {
        Ok(x) => x,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            // The server refused with a Status: print it as any refusal.
            let body = resp.body().clone().unwrap_or_default();
            let err = crate::client::status_error(resp.status().as_u16(), &body);
            return Err(conn.error(err));
        }
        Err(e) => return Err(fail("open an exec stream with", &e)),
    };
    let v5 = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|v| v.to_str().ok())
        == Some("v5.channel.k8s.io");
    Ok((ws, v5))
}

pub async fn exec(conn: &Conn, args: &ExecArgs) -> Result<i32, CliError> {
    let ns = conn.namespace.clone();
    let pod = match args.target.split_once('/') {
        Some((kind, name)) if resolve(kind)?.kind == Kind::ReplicationController => {
            super::logs::pod_of_rc(conn, name).await?
        }
        Some((kind, name)) if resolve(kind)?.kind == Kind::Pod => get_pod(conn, name).await?,
        Some((kind, _)) => {
            return Err(CliError::msg(format!(
                "cannot exec into {kind}: name a pod or a replication controller"
            )));
        }
        None => get_pod(conn, &args.target).await?,
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(CliError::msg(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let container = match &args.container {
        Some(c) => c.clone(),
        None => super::logs::default_container(&pod)
            .ok_or_else(|| CliError::msg(format!("pod {pod_name} has no containers")))?,
    };
    let stdin_tty = rustix::termios::isatty(std::io::stdin());
    let tty = if args.tty && !(args.stdin && stdin_tty) {
        if !args.quiet {
            eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
        }
        false
    } else {
        args.tty
    };
    let mut query: Vec<(&str, String)> = args
        .command
        .iter()
        .map(|c| ("command", c.clone()))
        .collect();
    query.push(("container", container));
    query.push(("stdin", args.stdin.to_string()));
    query.push(("stdout", "true".into()));
    query.push(("stderr", (!tty).to_string()));
    query.push(("tty", tty.to_string()));
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query)
        .finish();
    let path = format!(
        "{}/{pod_name}/exec?{query}",
        crate::client::Client::collection_path(catalog::of(Kind::Pod), Some(&ns))
    );
    let (ws, v5) = connect(conn, &path).await?;
    tracing::debug!(v5, "exec stream open");
    let (mut tx, mut rx) = ws.split();

    let _raw = tty.then(RawMode::enter).flatten();
    let (frames, mut outgoing) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    if tty && let Some(size) = terminal_size() {
        let mut frame = vec![RESIZE];
        frame.extend(size.to_string().into_bytes());
        let _ = frames.send(frame).await;
        let resizes = frames.clone();
        tokio::spawn(async move {
            let Ok(mut winch) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some(size) = terminal_size() {
                    let mut frame = vec![RESIZE];
                    frame.extend(size.to_string().into_bytes());
                    if resizes.send(frame).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
    if args.stdin {
        let input = frames.clone();
        tokio::spawn(async move {
            let mut stdin = tokio::io::stdin();
            let mut buf = vec![0u8; 8192];
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut frame = Vec::with_capacity(n + 1);
                        frame.push(STDIN);
                        frame.extend_from_slice(&buf[..n]);
                        if input.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
            if v5 {
                let _ = input.send(vec![CLOSE, STDIN]).await;
            }
        });
    }
    drop(frames);
    let writer = tokio::spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if tx.send(Message::binary(frame)).await.is_err() {
                break;
            }
        }
    });

    let mut status = None;
    while let Some(msg) = rx.next().await {
        let data = match msg {
            Ok(Message::Binary(b)) => b.to_vec(),
            Ok(Message::Close(_)) => break,
            Ok(_) => continue,
            Err(e) => {
                return Err(CliError::msg(format!("the exec stream broke: {e}")));
            }
        };
        let Some((&channel, payload)) = data.split_first() else {
            continue;
        };
        match channel {
            STDOUT => {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(payload).and_then(|_| o.flush());
            }
            STDERR => {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(payload).and_then(|_| e.flush());
            }
            ERROR if !payload.is_empty() => {
                status = serde_json::from_slice::<Value>(payload).ok();
            }
            _ => {}
        }
    }
    writer.abort();
    drop(_raw);
    let code = match status {
        Some(s) => exit_code(&s)?,
        None => 0,
    };
    if code != 0 && !args.quiet {
        eprintln!("command terminated with exit code {code}");
    }
    Ok(code)
}

async fn get_pod(conn: &Conn, name: &str) -> Result<Value, CliError> {
    conn.client
        .get(catalog::of(Kind::Pod), Some(&conn.namespace), name)
        .await
        .map_err(|e| conn.error(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_gives_the_exit_code_or_the_error() {
        assert_eq!(exit_code(&json!({"status": "Success"})).unwrap(), 0);
        let failed = json!({"status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}});
        assert_eq!(exit_code(&failed).unwrap(), 3);
        let err = exit_code(&json!({"status": "Failure", "message": "container not found"}));
        assert_eq!(err.err().unwrap().message, "container not found");
    }
}
