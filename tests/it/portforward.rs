//! `pods/portforward` against a real server and node, to a pod whose container echoes
//! what each connection sends: kubectl port-forward to the pod (over its WebSocket
//! tunnel and over SPDY/3.1 as older kubectl speaks it) and to a Service by its named
//! target port, two connections at once through one forward; and, without kubectl, raw
//! clients of SPDY/3.1 over HTTP/1.1 and of the WebSocket channel protocol (also through
//! the node agent's endpoint), where a port nobody listens on is told on its error stream
//! while the other connections go on.

use std::path::PathBuf;
use std::process::Stdio;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use berth::api::portforward::spdy::{Decoder, Encoder, Frame, Headers};

use crate::node::{NODE, PODS, delete_pod, pod_until, server};
use crate::support::{TestServer, eventually, within};

const SERVICES: &str = "/api/v1/namespaces/default/services";

/// The container: echoes on `$POD_IP:$1` what each connection sends, until its end.
const ECHO: &str = r#"import os, socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], int(sys.argv[1])))
s.listen(16)
def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"#;

/// A port free on this machine now (pods share its network).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs an echo pod on `port` (named `echo`) and waits until it listens.
async fn echo_pod(s: &TestServer, name: &str, port: u16) -> Value {
    let p = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["python3", "-c", ECHO, port.to_string()],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "echo", "containerPort": port}],
            }],
        },
    });
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    let pod = pod_until(s, name, "running", |p| p["status"]["phase"] == "Running").await;
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    eventually(30, "the echo listens", || async {
        TcpStream::connect((ip.as_str(), port))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await;
    pod
}

/// Sends `msg` on `conn` and reads as much back.
async fn echoed(conn: &mut TcpStream, msg: &[u8]) {
    conn.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    within(20, conn.read_exact(&mut back)).await.unwrap();
    assert_eq!(back, msg);
}

/// Two connections at once through the local port of a forward, interleaved, then each
/// ended by the client (the pod sees the end and closes).
async fn two_connections(local: u16) {
    let mut a = TcpStream::connect(("127.0.0.1", local)).await.unwrap();
    let mut b = TcpStream::connect(("127.0.0.1", local)).await.unwrap();
    a.write_all(b"first from a").await.unwrap();
    echoed(&mut b, b"first from b").await;
    let mut back = [0u8; 12];
    within(20, a.read_exact(&mut back)).await.unwrap();
    assert_eq!(&back, b"first from a");
    let big: Vec<u8> = (0..512 * 1024u32).map(|i| (i % 253) as u8).collect();
    let (mut ar, mut aw) = a.into_split();
    let sent = big.clone();
    let writer = tokio::spawn(async move {
        aw.write_all(&sent).await.unwrap();
        aw.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    within(60, ar.read_to_end(&mut got)).await.unwrap();
    writer.await.unwrap();
    assert!(
        got == big,
        "half a MiB comes back whole ({} bytes)",
        got.len()
    );
    echoed(&mut b, b"b still works").await;
    b.shutdown().await.unwrap();
    let mut rest = Vec::new();
    within(20, b.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty());
}

/// kubectl: the virtualenv's that CI installs, else one on `PATH`.
pub(crate) fn kubectl() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-kubectl/bin/kubectl");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

/// A running `kubectl port-forward`; killed when dropped.
struct Forward {
    local: u16,
    child: tokio::process::Child,
    cache: tempfile::TempDir,
}

impl Forward {
    /// Runs `kubectl port-forward TARGET :REMOTE` (with `env`) and waits until it listens;
    /// `remote` is the pod's port kubectl says it forwards to.
    async fn start(
        s: &TestServer,
        kubectl: &PathBuf,
        what: &str,
        asked: u16,
        remote: u16,
        env: &[(&str, &str)],
    ) -> Forward {
        let cache = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(s.kubeconfig())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(["-v=4", "port-forward", what, &format!(":{asked}")])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = within(60, async {
            loop {
                match lines.next_line().await.unwrap() {
                    Some(l) if l.starts_with("Forwarding from 127.0.0.1:") => return Some(l),
                    Some(_) => {}
                    None => return None,
                }
            }
        })
        .await;
        let Some(line) = line else {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err).await;
            panic!("kubectl port-forward {what} did not start: {err}");
        };
        // "Forwarding from 127.0.0.1:41234 -> 8080"
        let (local, to) = line["Forwarding from 127.0.0.1:".len()..]
            .split_once(" -> ")
            .unwrap();
        assert_eq!(to, remote.to_string(), "{line}");
        // Its "Handling connection" lines must not fill the pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Forward {
            local: local.parse().unwrap(),
            child,
            cache,
        }
    }

    /// Stops kubectl and returns what it logged.
    async fn stop(mut self) -> String {
        self.child.start_kill().unwrap();
        let mut err = String::new();
        let _ = within(
            20,
            self.child.stderr.take().unwrap().read_to_string(&mut err),
        )
        .await;
        let _ = self.child.wait().await;
        drop(self.cache);
        err
    }
}

#[tokio::test]
async fn kubectl_forwards_a_pods_port_over_its_websocket_tunnel_and_over_spdy() {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "no kubectl (neither .venv-kubectl/bin/kubectl nor one on PATH): kubectl port-forward is not tried"
        );
        return;
    };
    let s = server().await;
    let port = free_port();
    echo_pod(&s, "echo", port).await;
    // Current kubectl tunnels SPDY in WebSocket messages; with the tunnel turned off it
    // upgrades HTTP/1.1 to SPDY/3.1, as kubectl before 1.31 does.
    for env in [&[][..], &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")][..]] {
        let f = Forward::start(&s, &kubectl, "pod/echo", port, port, env).await;
        two_connections(f.local).await;
        let log = f.stop().await;
        let tunnelled = log.contains(r#""Negotiation complete" protocol="portforward.k8s.io""#);
        assert_eq!(tunnelled, env.is_empty(), "{env:?}: {log}");
        assert!(
            !log.contains("fallback to secondary dialer"),
            "kubectl used the protocol it tried first ({env:?}): {log}"
        );
        // klog's error lines start with E.
        assert!(!log.lines().any(|l| l.starts_with('E')), "{log}");
    }
    delete_pod(&s, "echo").await;
}

#[tokio::test]
async fn kubectl_forwards_a_service_to_its_pods_named_target_port() {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "no kubectl (neither .venv-kubectl/bin/kubectl nor one on PATH): kubectl port-forward svc/... is not tried"
        );
        return;
    };
    let s = server().await;
    let port = free_port();
    echo_pod(&s, "echo-svc", port).await;
    let svc = json!({
        "metadata": {"name": "echo-svc"},
        "spec": {"selector": {"app": "echo-svc"}, "ports": [{"port": 80, "targetPort": "echo"}]},
    });
    let (code, out) = s.post(SERVICES, svc).await;
    assert_eq!(code, 201, "{out}");
    // kubectl finds the pod behind the Service and its port by name.
    let f = Forward::start(&s, &kubectl, "svc/echo-svc", 80, port, &[]).await;
    let mut conn = TcpStream::connect(("127.0.0.1", f.local)).await.unwrap();
    echoed(&mut conn, b"through the service").await;
    drop(conn);
    f.stop().await;
    delete_pod(&s, "echo-svc").await;
}

/// A TLS connection to the server.
async fn connect(s: &TestServer) -> tokio_rustls::client::TlsStream<TcpStream> {
    let host = s.url.trim_start_matches("https://");
    let tcp = TcpStream::connect(host).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    crate::exec::tls(&s.ca_pem)
        .connect(name, tcp)
        .await
        .unwrap()
}

/// A SPDY client of this test, on berth's framing.
struct Spdy<S> {
    io: S,
    enc: Encoder,
    dec: Decoder,
}

fn stream_headers(kind: &str, port: u16, request: u32) -> Headers {
    [
        ("streamtype", kind.to_string()),
        ("port", port.to_string()),
        ("requestid", request.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

impl<S: AsyncRead + AsyncWrite + Unpin> Spdy<S> {
    async fn send(&mut self, frame: Frame) {
        let mut buf = Vec::new();
        self.enc.encode(&frame, &mut buf);
        self.io.write_all(&buf).await.unwrap();
    }

    /// The next frame but window updates.
    async fn next(&mut self) -> Frame {
        loop {
            match self.dec.next_frame().unwrap() {
                Some(Frame::WindowUpdate { .. }) => {}
                Some(f) => return f,
                None => {
                    let mut buf = vec![0u8; 16 * 1024];
                    let n = within(20, self.io.read(&mut buf)).await.unwrap();
                    assert!(n > 0, "the server closed the session");
                    self.dec.push(&buf[..n]);
                }
            }
        }
    }

    /// Opens the error and data streams of `request` (ids 4n+1 and 4n+3).
    async fn pair(&mut self, request: u32, port: u16) -> (u32, u32) {
        let (error, data) = (4 * request + 1, 4 * request + 3);
        for (stream, kind) in [(error, "error"), (data, "data")] {
            self.send(Frame::SynStream {
                stream,
                associated: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers: stream_headers(kind, port, request),
            })
            .await;
            let reply = self.next().await;
            assert!(
                matches!(reply, Frame::SynReply { stream: s, .. } if s == stream),
                "{reply:?}"
            );
        }
        (error, data)
    }

    async fn echo(&mut self, stream: u32, msg: &'static [u8]) {
        self.send(Frame::Data {
            stream,
            fin: false,
            data: bytes::Bytes::from_static(msg),
        })
        .await;
        let mut got = Vec::new();
        while got.len() < msg.len() {
            match self.next().await {
                Frame::Data {
                    stream: s, data, ..
                } if s == stream => got.extend_from_slice(&data),
                other => panic!("waiting for data on {stream}: {other:?}"),
            }
        }
        assert_eq!(got, msg);
    }
}

#[tokio::test]
async fn spdy_over_http1_forwards_connections_and_tells_a_refused_one() {
    let s = server().await;
    let (port, refused) = (free_port(), free_port());
    echo_pod(&s, "raw-spdy", port).await;
    let mut tls = connect(&s).await;
    let host = s.url.trim_start_matches("https://");
    let request = format!(
        "POST {PODS}/raw-spdy/portforward HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\
         Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n\
         Content-Length: 0\r\n\r\n",
        s.token
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(within(20, tls.read_u8()).await.unwrap());
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    assert!(head.contains("\r\nupgrade: spdy/3.1\r\n"), "{head}");
    assert!(
        head.contains("\r\nx-stream-protocol-version: portforward.k8s.io\r\n"),
        "{head}"
    );
    let mut c = Spdy {
        io: tls,
        enc: Encoder::new(),
        dec: Decoder::new(),
    };
    // Two connections at once, then one to a port nobody listens on.
    let (_, a) = c.pair(0, port).await;
    let (_, b) = c.pair(1, port).await;
    c.echo(a, b"to a").await;
    c.echo(b, b"to b").await;
    let (error, data) = c.pair(2, refused).await;
    let Frame::Data {
        stream,
        fin: false,
        data: message,
    } = c.next().await
    else {
        panic!("a message on the error stream");
    };
    assert_eq!(stream, error);
    let message = String::from_utf8_lossy(&message).into_owned();
    assert!(
        message.starts_with(&format!(
            "error forwarding port {refused} to pod raw-spdy_default, uid "
        )),
        "{message}"
    );
    assert!(message.contains("onnection refused"), "{message}");
    let mut finished = Vec::new();
    while finished.len() < 2 {
        match c.next().await {
            Frame::Data {
                stream, fin: true, ..
            } => finished.push(stream),
            other => panic!("the refused pair is finished: {other:?}"),
        }
    }
    assert_eq!(finished, [data, error]);
    // The others go on.
    c.echo(a, b"a again").await;
    c.echo(b, b"b again").await;
    // A ping is answered.
    c.send(Frame::Ping { id: 1 }).await;
    assert_eq!(c.next().await, Frame::Ping { id: 1 });
    drop(c);
    delete_pod(&s, "raw-spdy").await;
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

async fn websocket(s: &TestServer, path: &str, protocol: &str) -> (Socket, Option<String>) {
    let url = format!("{}{path}", s.url.replace("https://", "wss://"));
    let mut req = url.into_client_request().unwrap();
    let headers = req.headers_mut();
    headers.insert(
        "Authorization",
        format!("Bearer {}", s.token).parse().unwrap(),
    );
    headers.insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    let (ws, resp) = tokio_tungstenite::client_async(req, connect(s).await)
        .await
        .unwrap();
    let chosen = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().unwrap().to_string());
    (ws, chosen)
}

/// The next (channel, data) of a session; base64 text decoded.
async fn channel_frame(ws: &mut Socket) -> Option<(u8, Vec<u8>)> {
    loop {
        match within(20, ws.next()).await? {
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

#[tokio::test]
async fn the_websocket_channel_protocol_forwards_the_ports_in_its_query() {
    let s = server().await;
    let (port, refused) = (free_port(), free_port());
    echo_pod(&s, "raw-ws", port).await;
    let (mut ws, chosen) = websocket(
        &s,
        &format!("{PODS}/raw-ws/portforward?ports={port},{refused}"),
        "v4.channel.k8s.io",
    )
    .await;
    assert_eq!(chosen.as_deref(), Some("v4.channel.k8s.io"));
    // Each channel starts with its port, little-endian.
    for (channel, p) in [(0, port), (1, port), (2, refused), (3, refused)] {
        assert_eq!(
            channel_frame(&mut ws).await,
            Some((channel, p.to_le_bytes().to_vec()))
        );
    }
    let (channel, message) = channel_frame(&mut ws).await.unwrap();
    assert_eq!(channel, 3, "the refused port's error channel");
    let message = String::from_utf8(message).unwrap();
    assert!(
        message.starts_with(&format!(
            "error forwarding port {refused} to pod raw-ws_default"
        )),
        "{message}"
    );
    // The first port goes on; input may come in text frames too (the Python client's).
    ws.send(Message::binary(b"\x00over websocket".to_vec()))
        .await
        .unwrap();
    assert_eq!(
        channel_frame(&mut ws).await,
        Some((0, b"over websocket".to_vec()))
    );
    ws.send(Message::text("\u{0}as text")).await.unwrap();
    assert_eq!(channel_frame(&mut ws).await, Some((0, b"as text".to_vec())));
    ws.close(None).await.unwrap();

    let (mut ws, chosen) = websocket(
        &s,
        &format!("{PODS}/raw-ws/portforward?ports={port}"),
        "v4.base64.channel.k8s.io",
    )
    .await;
    assert_eq!(chosen.as_deref(), Some("v4.base64.channel.k8s.io"));
    assert_eq!(
        channel_frame(&mut ws).await,
        Some((0, port.to_le_bytes().to_vec()))
    );
    assert_eq!(
        channel_frame(&mut ws).await,
        Some((1, port.to_le_bytes().to_vec()))
    );
    ws.send(Message::text(format!(
        "0{}",
        base64::engine::general_purpose::STANDARD.encode("in base64")
    )))
    .await
    .unwrap();
    assert_eq!(
        channel_frame(&mut ws).await,
        Some((0, b"in base64".to_vec()))
    );
    ws.close(None).await.unwrap();

    // The node agent's own endpoint, under the node proxy, as the kubelet's (`port`).
    let (mut ws, _) = websocket(
        &s,
        &format!("/api/v1/nodes/{NODE}/proxy/portForward/default/raw-ws?port={port}"),
        "v4.channel.k8s.io",
    )
    .await;
    for channel in [0, 1] {
        assert_eq!(
            channel_frame(&mut ws).await,
            Some((channel, port.to_le_bytes().to_vec()))
        );
    }
    ws.send(Message::binary(b"\x00to the agent".to_vec()))
        .await
        .unwrap();
    assert_eq!(
        channel_frame(&mut ws).await,
        Some((0, b"to the agent".to_vec()))
    );
    ws.close(None).await.unwrap();
    delete_pod(&s, "raw-ws").await;
}

#[tokio::test]
async fn port_forward_requests_are_checked_before_the_upgrade() {
    let s = server().await;
    let port = free_port();
    echo_pod(&s, "checked", port).await;
    let client = crate::support::https1_client(&s.ca_pem);
    let call = |method: reqwest::Method, path: String, headers: &[(&'static str, &'static str)]| {
        let mut req = client
            .request(method, format!("{}{path}", s.url))
            .bearer_auth(&s.token);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        async move {
            let resp = req.send().await.unwrap();
            let code = resp.status().as_u16();
            (code, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let path = format!("{PODS}/checked/portforward");
    let (code, st) = call(reqwest::Method::GET, path.clone(), &[]).await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("port forwarding needs an upgrade"),
        "{st}"
    );
    let spdy = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
    let (code, st) = call(
        reqwest::Method::POST,
        path.clone(),
        &[
            spdy[0],
            spdy[1],
            ("X-Stream-Protocol-Version", "v9.example"),
        ],
    )
    .await;
    assert_eq!(code, 403, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unable to negotiate protocol"),
        "{st}"
    );
    let ws = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
    ];
    let (code, st) = call(reqwest::Method::GET, path.clone(), &ws).await;
    assert_eq!(code, 400, "{st}");
    assert_eq!(st["message"], "query parameter \"ports\" is required");
    let (code, _) = call(reqwest::Method::DELETE, path, &[]).await;
    assert_eq!(code, 405);
    // A pod no node runs cannot be reached.
    let mut p = json!({"metadata": {"name": "nowhere"}, "spec": {
        "nodeSelector": {"no-such": "node"},
        "containers": [{"name": "main", "image": "busybox"}]}});
    p["spec"]["containers"][0]["command"] = json!(["sleep", "7491"]);
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    let (code, st) = call(
        reqwest::Method::GET,
        format!("{PODS}/nowhere/portforward?ports=80"),
        &ws,
    )
    .await;
    assert_eq!(code, 400, "{st}");
    assert_eq!(st["message"], "pod nowhere does not have a host assigned");
    s.delete(&format!("{PODS}/nowhere")).await;
    delete_pod(&s, "checked").await;
}
