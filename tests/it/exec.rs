//! `pods/exec` over WebSocket against a real server and node: a terminal (`tty`) with its
//! size, resizes and input, the end of input on a terminal, the `v4` and base64
//! protocols, input in text frames, a client going away taking its command with it, and
//! `pods/attach` to a container with a terminal and to one with output only.

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::node::{PODS, pod, pod_until, processes_with, server};
use crate::support::{TestServer, eventually, within};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// The client side of one exec session.
pub(crate) struct Client {
    ws: Socket,
    /// The protocol the server chose.
    protocol: Option<String>,
    /// What came on stdout and stderr so far.
    out: Vec<u8>,
    err: Vec<u8>,
}

pub(crate) fn tls(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

impl Client {
    /// Opens `path` (with its query) offering `protocols` (comma-separated).
    pub(crate) async fn connect(s: &TestServer, path: &str, protocols: &str) -> Client {
        let url = format!("{}{path}", s.url.replace("https://", "wss://"));
        let mut req = url.into_client_request().unwrap();
        let headers = req.headers_mut();
        headers.insert(
            "Authorization",
            format!("Bearer {}", s.token).parse().unwrap(),
        );
        headers.insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
        let host = req.uri().host().unwrap().to_string();
        let port = req.uri().port_u16().unwrap();
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from(host).unwrap();
        let stream = tls(&s.ca_pem).connect(name, tcp).await.unwrap();
        let (ws, resp) = tokio_tungstenite::client_async(req, stream).await.unwrap();
        let protocol = resp
            .headers()
            .get("Sec-WebSocket-Protocol")
            .map(|v| v.to_str().unwrap().to_string());
        Client {
            ws,
            protocol,
            out: Vec::new(),
            err: Vec::new(),
        }
    }

    fn base64(&self) -> bool {
        self.protocol
            .as_deref()
            .is_some_and(|p| p.contains("base64"))
    }

    pub(crate) async fn send(&mut self, stream: u8, data: &[u8]) {
        let msg = if self.base64() {
            let mut text = char::from(b'0' + stream).to_string();
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut frame = vec![stream];
            frame.extend_from_slice(data);
            Message::binary(frame)
        };
        self.ws.send(msg).await.unwrap();
    }

    pub(crate) async fn resize(&mut self, width: u16, height: u16) {
        let size = json!({"Width": width, "Height": height}).to_string();
        self.send(4, size.as_bytes()).await;
    }

    /// The next frame as (stream, data); `None` once the server closed.
    async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            match within(20, self.ws.next()).await? {
                Ok(Message::Binary(b)) => return Some((b[0], b[1..].to_vec())),
                Ok(Message::Text(t)) => {
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(&t.as_bytes()[1..])
                        .unwrap();
                    return Some((t.as_bytes()[0] - b'0', data));
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Reads until stdout holds `needle`.
    pub(crate) async fn until_out(&mut self, needle: &str) {
        while !String::from_utf8_lossy(&self.out).contains(needle) {
            match self.next().await {
                Some((1, d)) => self.out.extend(d),
                Some((2, d)) => self.err.extend(d),
                Some((3, s)) => panic!(
                    "ended waiting for {needle:?}: {}; out {:?}",
                    String::from_utf8_lossy(&s),
                    String::from_utf8_lossy(&self.out)
                ),
                Some(_) => {}
                None => panic!(
                    "closed waiting for {needle:?}; out {:?}",
                    String::from_utf8_lossy(&self.out)
                ),
            }
        }
    }

    /// Reads to the end; returns what came on stream 3 (empty when nothing did).
    pub(crate) async fn finish(&mut self) -> Vec<u8> {
        let mut status = Vec::new();
        while let Some((stream, d)) = self.next().await {
            match stream {
                1 => self.out.extend(d),
                2 => self.err.extend(d),
                3 => status.extend(d),
                _ => {}
            }
        }
        status
    }

    pub(crate) fn out(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }
}

fn exit_code(status: &[u8]) -> Value {
    let status: Value = serde_json::from_slice(status).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    status["details"]["causes"][0]["message"].clone()
}

async fn running(s: &TestServer, name: &str, marker: &str) {
    s.post(PODS, pod(name, "Always", &format!("exec sleep {marker}")))
        .await;
    pod_until(s, name, "running", |p| p["status"]["phase"] == "Running").await;
}

async fn delete(s: &TestServer, name: &str, marker: &str) {
    s.delete(&format!("{PODS}/{name}")).await;
    eventually(30, "the container is stopped", || async {
        match processes_with(&format!("sleep {marker}")) {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_terminal_has_the_size_asked_for_follows_resizes_and_takes_input() {
    let s = server().await;
    running(&s, "term", "7321").await;
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/term/exec?command=sh&stdin=true&stdout=true&stderr=true&tty=true"),
        "v5.channel.k8s.io",
    )
    .await;
    assert_eq!(c.protocol.as_deref(), Some("v5.channel.k8s.io"));
    c.resize(80, 24).await;
    c.send(0, b"tty; stty size; echo on-err-$((40 + 2)) >&2\n")
        .await;
    c.until_out("24 80").await;
    c.until_out("on-err-42").await;
    assert!(c.out().contains("/dev/pts/"), "{}", c.out());
    c.resize(132, 50).await;
    c.send(0, b"stty size\n").await;
    c.until_out("50 132").await;
    c.send(0, b"exit 7\n").await;
    let status = c.finish().await;
    assert_eq!(exit_code(&status), "7");
    assert!(
        c.err.is_empty(),
        "stderr is merged into stdout on a terminal"
    );
    // A command that reads its size at once finds the client's first size there.
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/term/exec?command=stty&command=size&stdout=true&tty=true"),
        "v5.channel.k8s.io",
    )
    .await;
    c.resize(90, 30).await;
    let status = c.finish().await;
    assert!(String::from_utf8_lossy(&status).contains("Success"));
    assert_eq!(c.out(), "30 90\r\n");
    delete(&s, "term", "7321").await;
}

#[tokio::test]
async fn closing_stdin_ends_the_input_of_a_program_on_a_terminal() {
    let s = server().await;
    running(&s, "eof", "7322").await;
    let mut c = Client::connect(
        &s,
        &format!(
            "{PODS}/eof/exec?command=sh&command=-c&command=cat%3Becho%20read-all&stdin=true&stdout=true&tty=true"
        ),
        "v5.channel.k8s.io",
    )
    .await;
    // A half typed line, then the end of stdin: cat gets the line, then its end.
    c.send(0, b"no-newline").await;
    c.send(255, &[0]).await;
    let status = c.finish().await;
    assert_eq!(
        serde_json::from_slice::<Value>(&status).unwrap()["status"],
        "Success"
    );
    // Once echoed by the terminal, once written by cat.
    assert!(c.out().matches("no-newline").count() >= 2, "{}", c.out());
    assert!(c.out().contains("read-all"), "{}", c.out());
    delete(&s, "eof", "7322").await;
}

#[tokio::test]
async fn the_v4_and_base64_protocols_carry_streams_and_exit_codes() {
    let s = server().await;
    running(&s, "old", "7323").await;
    let query = "command=sh&command=-c&command=read%20x%3Becho%20out-%24x%3Becho%20err%20%3E%262%3Bexit%203&stdin=true&stdout=true&stderr=true";
    // The client's first offer that is served wins.
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/old/exec?{query}"),
        "v4.channel.k8s.io, v5.channel.k8s.io",
    )
    .await;
    assert_eq!(c.protocol.as_deref(), Some("v4.channel.k8s.io"));
    c.send(0, b"four\n").await;
    let status = c.finish().await;
    assert_eq!(exit_code(&status), "3");
    assert_eq!(c.out(), "out-four\n");
    assert_eq!(c.err, b"err\n");
    // kubectl's order: v5 first.
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/old/exec?command=echo&command=five&stdout=true"),
        "v5.channel.k8s.io, v4.channel.k8s.io, v4.base64.channel.k8s.io",
    )
    .await;
    assert_eq!(c.protocol.as_deref(), Some("v5.channel.k8s.io"));
    c.finish().await;
    assert_eq!(c.out(), "five\n");

    let mut c = Client::connect(
        &s,
        &format!("{PODS}/old/exec?{query}"),
        "unknown.example, base64.channel.k8s.io",
    )
    .await;
    assert_eq!(c.protocol.as_deref(), Some("base64.channel.k8s.io"));
    c.send(0, b"b64\n").await;
    let status = c.finish().await;
    // Before v4, stream 3 carries only a failure's message.
    assert!(
        String::from_utf8_lossy(&status).contains("exit code 3"),
        "{}",
        String::from_utf8_lossy(&status)
    );
    assert_eq!(c.out(), "out-b64\n");

    // A command that succeeds sends nothing on stream 3 before v4.
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/old/exec?command=echo&command=fine&stdout=true"),
        "channel.k8s.io",
    )
    .await;
    assert_eq!(c.finish().await, b"");
    assert_eq!(c.out(), "fine\n");

    let resp = crate::support::https1_client(&s.ca_pem)
        .request(
            reqwest::Method::GET,
            format!("{}{PODS}/old/exec?command=true&stdout=true", s.url),
        )
        .bearer_auth(&s.token)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("Sec-WebSocket-Protocol", "v9.channel.k8s.io")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let st: Value = resp.json().await.unwrap();
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("requested protocol(s) are not supported"),
        "{st}"
    );
    delete(&s, "old", "7323").await;
}

#[tokio::test]
async fn stdin_may_come_in_text_frames_as_the_python_client_sends_it() {
    let s = server().await;
    running(&s, "text", "7328").await;
    let mut c = Client::connect(
        &s,
        &format!(
            "{PODS}/text/exec?command=sh&command=-c&command=read%20x%3Becho%20got-%24x&stdin=true&stdout=true"
        ),
        "v4.channel.k8s.io",
    )
    .await;
    // `chr(0) + data` as text, as the Python client writes a string to stdin.
    c.ws.send(Message::text("\u{0}typed\n")).await.unwrap();
    let status = c.finish().await;
    assert_eq!(
        serde_json::from_slice::<Value>(&status).unwrap()["status"],
        "Success"
    );
    assert_eq!(c.out(), "got-typed\n");
    delete(&s, "text", "7328").await;
}

#[tokio::test]
async fn a_client_that_goes_away_takes_its_command_with_it() {
    let s = server().await;
    running(&s, "gone", "7324").await;
    for tty in [true, false] {
        let c = Client::connect(
            &s,
            &format!(
                "{PODS}/gone/exec?command=sh&command=-c&command=sleep%207325%3Btrue&stdout=true&tty={tty}"
            ),
            "v5.channel.k8s.io",
        )
        .await;
        eventually(20, "the command runs", || async {
            match processes_with("sleep 7325") {
                0 => Err("not yet".to_string()),
                _ => Ok(()),
            }
        })
        .await;
        drop(c);
        eventually(20, "the command is killed", || async {
            match processes_with("sleep 7325") {
                0 => Ok(()),
                n => Err(format!("{n} left (tty {tty})")),
            }
        })
        .await;
    }
    delete(&s, "gone", "7324").await;
}

#[tokio::test]
async fn attach_types_into_the_terminal_of_the_main_process_and_ends_with_it() {
    let s = server().await;
    let p = json!({
        "metadata": {"name": "shell"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh"], "stdin": true, "tty": true}],
        },
    });
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    pod_until(&s, "shell", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/shell/attach?stdin=true&stdout=true&stderr=true&tty=true"),
        "v5.channel.k8s.io",
    )
    .await;
    c.resize(61, 19).await;
    c.send(0, b"tty; stty size; echo main-$((40 + 2)) >&2\n")
        .await;
    c.until_out("main-42").await;
    c.until_out("19 61").await;
    assert!(c.out().contains("/dev/pts/"), "{}", c.out());
    c.send(0, b"exit 4\n").await;
    // The session ends with the container, successfully: the exit code is the pod's.
    let status = c.finish().await;
    assert_eq!(
        serde_json::from_slice::<Value>(&status).unwrap()["status"],
        "Success"
    );
    assert!(c.err.is_empty());
    let done = pod_until(&s, "shell", "failed", |p| p["status"]["phase"] == "Failed").await;
    assert_eq!(
        done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        4
    );
    // What was typed is in the container's log too.
    let log = s
        .req(reqwest::Method::GET, &format!("{PODS}/shell/log"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(log.contains("main-42"), "{log}");
    let (code, st) = s.get(&format!("{PODS}/shell/attach?stdout=true")).await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "cannot attach to a container in a completed pod; current phase is Failed"
    );
    s.delete(&format!("{PODS}/shell")).await;
}

#[tokio::test]
async fn attach_to_a_container_without_stdin_streams_its_output_only() {
    let s = server().await;
    let script = "i=0; while :; do echo tick-$i; echo tock-$i >&2; i=$((i+1)); sleep 0.2; done";
    s.post(PODS, pod("ticker", "Always", script)).await;
    pod_until(&s, "ticker", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/ticker/attach?stdin=true&stdout=true&stderr=true"),
        "v5.channel.k8s.io",
    )
    .await;
    // The container keeps no stdin: input goes nowhere.
    c.send(0, b"ignored\n").await;
    c.until_out("tick-").await;
    while !String::from_utf8_lossy(&c.err).contains("tock-") {
        match c.next().await {
            Some((1, d)) => c.out.extend(d),
            Some((2, d)) => c.err.extend(d),
            other => panic!("unexpected {other:?}"),
        }
    }
    drop(c);
    // Leaving does not stop the container.
    let mut again = Client::connect(
        &s,
        &format!("{PODS}/ticker/attach?stdout=true"),
        "v5.channel.k8s.io",
    )
    .await;
    again.until_out("tick-").await;
    let (code, st) = s.get(&format!("{PODS}/ticker/attach")).await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "you must specify at least 1 of stdin, stdout, stderr"
    );
    s.delete(&format!("{PODS}/ticker")).await;
    eventually(30, "the container is stopped", || async {
        match processes_with("tick-") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn exec_and_attach_need_a_pod_on_a_node() {
    let s = server().await;
    let mut p = pod("nowhere", "Always", "exec sleep 7327");
    p["spec"]["nodeSelector"] = json!({"no-such": "node"});
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    for sub in ["exec?command=true&stdout=true", "attach?stdout=true"] {
        let (code, st) = s.get(&format!("{PODS}/nowhere/{sub}")).await;
        assert_eq!(code, 400, "{st}");
        assert_eq!(st["message"], "pod nowhere does not have a host assigned");
    }
    s.delete(&format!("{PODS}/nowhere")).await;
}

/// Reads a log streamed over WebSocket to its close: the messages' bytes, base64 text
/// decoded.
async fn log_over_websocket(c: &mut Client) -> String {
    let mut log = Vec::new();
    loop {
        match within(20, c.ws.next()).await {
            Some(Ok(Message::Binary(b))) => log.extend_from_slice(&b),
            Some(Ok(Message::Text(t))) => log.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(t.as_bytes())
                    .unwrap(),
            ),
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("the log stream failed: {e}"),
        }
    }
    String::from_utf8(log).unwrap()
}

/// Upstream's conformance test "Pods should support retrieving logs from the container
/// over websockets", in binary and base64, and a followed log that ends with its pod.
#[tokio::test]
async fn logs_stream_over_websocket_in_binary_and_base64() {
    let s = server().await;
    s.post(PODS, pod("alive", "Never", "echo container is alive"))
        .await;
    pod_until(&s, "alive", "succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    for protocol in ["binary.k8s.io", "base64.binary.k8s.io"] {
        let mut c =
            Client::connect(&s, &format!("{PODS}/alive/log?container=main"), protocol).await;
        assert_eq!(c.protocol.as_deref(), Some(protocol));
        assert_eq!(log_over_websocket(&mut c).await, "container is alive\n");
    }
    // A log that is still being written comes as it is written, to the container's end.
    s.post(
        PODS,
        pod(
            "counting",
            "Never",
            "for i in 1 2 3; do echo line-$i; sleep 0.3; done",
        ),
    )
    .await;
    pod_until(&s, "counting", "running", |p| {
        p["status"]["phase"] != "Pending"
    })
    .await;
    let mut c = Client::connect(
        &s,
        &format!("{PODS}/counting/log?follow=true"),
        "binary.k8s.io",
    )
    .await;
    assert_eq!(log_over_websocket(&mut c).await, "line-1\nline-2\nline-3\n");
    // What a log refuses without an upgrade it refuses with one, before upgrading.
    let (code, st) = s.get(&format!("{PODS}/alive/log?container=other")).await;
    assert_eq!(code, 400, "{st}");
    assert_eq!(st["message"], "container other is not valid for pod alive");
    for name in ["alive", "counting"] {
        crate::node::delete_pod(&s, name).await;
    }
}
