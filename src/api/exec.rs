//! `pods/{name}/exec` over WebSocket with the `v5.channel.k8s.io` protocol, as kubectl
//! 1.30+ speaks it: binary frames whose first byte is the stream (0 stdin, 1 stdout,
//! 2 stderr, 3 the final `Status`, 255 "no more data on stream N"). The command runs in
//! the container's environment and working directory on this process's node. A terminal
//! (`-t`) is not offered yet.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::Error;

/// The protocol kubectl offers (and the only one served).
pub const PROTOCOL: &str = "v5.channel.k8s.io";

/// Where and how a container runs, for running a command beside it.
#[derive(Debug, Clone)]
pub struct ExecContext {
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// The container's process, whose mount namespace the command joins.
    pub pid: Option<i32>,
}

/// The query of an exec request (`command` repeats, so it is read as a list of pairs).
#[derive(Debug, Default)]
pub struct Request {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub tty: bool,
}

impl Request {
    pub fn parse(raw: Option<&str>) -> Request {
        let mut r = Request::default();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "command" => r.command.push(v.into_owned()),
                "container" if !v.is_empty() => r.container = Some(v.into_owned()),
                "stdin" => r.stdin = matches!(v.as_ref(), "true" | "1"),
                "tty" => r.tty = matches!(v.as_ref(), "true" | "1"),
                _ => {}
            }
        }
        r
    }
}

/// The container an exec is for: the one named, or the only one.
pub fn container(pod: &Value, asked: Option<&str>) -> Result<String, Error> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let all: Vec<&str> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod["spec"][*k].as_array())
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match asked {
        Some(c) if all.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(Error::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => pod["spec"]["containers"][0]["name"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Error::BadRequest(format!("pod {name} has no containers"))),
    }
}

fn status_frame(status: &Value) -> Message {
    let mut frame = vec![3u8];
    frame.extend_from_slice(&serde_json::to_vec(status).expect("JSON"));
    Message::Binary(Bytes::from(frame))
}

/// Upgrades to WebSocket and runs `argv` in `ctx`, relaying the streams.
pub fn serve(ws: WebSocketUpgrade, argv: Vec<String>, ctx: ExecContext, stdin: bool) -> Response {
    ws.protocols([PROTOCOL])
        .on_upgrade(move |socket| run(socket, argv, ctx, stdin))
        .into_response()
}

async fn run(socket: WebSocket, argv: Vec<String>, ctx: ExecContext, stdin: bool) {
    let (mut sink, mut incoming) = socket.split();
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let mut cmd = crate::runtime::command(program, &ctx.env, ctx.working_dir.as_deref());
    cmd.args(args)
        .stdin(if stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let joined = match ctx.pid {
        Some(pid) => crate::runtime::join_mounts(&mut cmd, pid, ctx.working_dir.as_deref()),
        None => Ok(()),
    };
    let mut child = match joined.and_then(|()| cmd.spawn()) {
        Ok(c) => c,
        Err(e) => {
            let status = json!({
                "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                "message": format!("Internal error occurred: error executing command in container: exec {program:?}: {e}"),
            });
            let _ = sink.send(status_frame(&status)).await;
            let _ = sink.send(close()).await;
            return;
        }
    };
    // Output frames go through one channel to the one sink.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(64);
    let pump = |mut from: Box<dyn tokio::io::AsyncRead + Unpin + Send>, stream: u8| {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match from.read(&mut buf[1..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        buf[0] = stream;
                        let frame = Message::Binary(Bytes::copy_from_slice(&buf[..=n]));
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    };
    let out = pump(Box::new(child.stdout.take().expect("piped")), 1);
    let err = pump(Box::new(child.stderr.take().expect("piped")), 2);
    drop(tx);
    let child_stdin = Arc::new(tokio::sync::Mutex::new(child.stdin.take()));
    // Input: stdin frames, the close signal for stdin, or the client going away.
    let input = {
        let child_stdin = child_stdin.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = incoming.next().await {
                match msg {
                    Message::Binary(b) if b.first() == Some(&0) => {
                        if let Some(w) = child_stdin.lock().await.as_mut() {
                            let _ = w.write_all(&b[1..]).await;
                        }
                    }
                    Message::Binary(b) if b.as_ref() == [255, 0] => {
                        child_stdin.lock().await.take();
                    }
                    Message::Close(_) => return false,
                    _ => {}
                }
            }
            false
        })
    };
    let forward = async {
        while let Some(frame) = rx.recv().await {
            if sink.send(frame).await.is_err() {
                return false;
            }
        }
        true
    };
    let still_there = forward.await;
    let _ = out.await;
    let _ = err.await;
    let status = child.wait().await;
    input.abort();
    if !still_there {
        return;
    }
    let code = status.ok().and_then(|s| s.code()).unwrap_or(137);
    let status = if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", argv.join(" ")),
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
    };
    let _ = sink.send(status_frame(&status)).await;
    let _ = sink.send(close()).await;
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
        assert!(r.stdin && !r.tty);
    }

    #[test]
    fn the_container_defaults_to_the_first() {
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(container(&pod, None).unwrap(), "a");
        assert_eq!(container(&pod, Some("b")).unwrap(), "b");
        assert!(container(&pod, Some("c")).is_err());
    }
}
