//! Probes (§7): liveness, readiness and startup checks by exec, httpGet (HTTP and
//! HTTPS), tcpSocket and grpc (the gRPC health checking protocol), with `initialDelaySeconds`, `periodSeconds`, `timeoutSeconds`,
//! `successThreshold` and `failureThreshold`. A pod worker keeps one [`Tracker`] per
//! container instance and probe kind and runs what is due.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub fn field(self) -> &'static str {
        match self {
            Kind::Startup => "startupProbe",
            Kind::Liveness => "livenessProbe",
            Kind::Readiness => "readinessProbe",
        }
    }

    /// As events name it: `Liveness probe failed: ...`.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }
}

/// The timing fields of a probe, with their defaults.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(probe: &Value) -> Self {
        let secs = |f: &str, d: u64, min: u64| probe[f].as_u64().map_or(d, |v| v.max(min));
        Timing {
            initial_delay: Duration::from_secs(secs("initialDelaySeconds", 0, 0)),
            period: Duration::from_secs(secs("periodSeconds", 10, 1)),
            timeout: Duration::from_secs(secs("timeoutSeconds", 1, 1)),
            success_threshold: secs("successThreshold", 1, 1) as u32,
            failure_threshold: secs("failureThreshold", 3, 1) as u32,
        }
    }
}

/// The state of one probe of one container instance.
#[derive(Debug, Clone)]
pub struct Tracker {
    pub timing: Timing,
    successes: u32,
    failures: u32,
    /// The current verdict: `None` until the thresholds decide.
    pub result: Option<bool>,
    pub due: Instant,
}

/// What a probe run changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    /// The verdict flipped to this.
    Became(bool),
}

impl Tracker {
    /// A tracker for an instance that started `running_for` ago.
    pub fn new(probe: &Value, running_for: Duration) -> Self {
        let timing = Timing::of(probe);
        let wait = timing.initial_delay.saturating_sub(running_for);
        Tracker {
            timing,
            successes: 0,
            failures: 0,
            result: None,
            due: Instant::now() + wait,
        }
    }

    /// Counts one result and schedules the next run.
    pub fn record(&mut self, ok: bool) -> Outcome {
        self.due = Instant::now() + self.timing.period;
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let verdict = if self.successes >= self.timing.success_threshold {
            Some(true)
        } else if self.failures >= self.timing.failure_threshold {
            Some(false)
        } else {
            self.result
        };
        if verdict != self.result {
            self.result = verdict;
            if let Some(v) = verdict {
                return Outcome::Became(v);
            }
        }
        Outcome::Unchanged
    }
}

/// Where a probe's target port is: a number, or the name of one of the container's ports.
fn port(spec: &Value, container: &Value) -> Result<u16, String> {
    match &spec["port"] {
        Value::Number(n) => n
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("invalid port {n}")),
        Value::String(name) => container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name.as_str())
            .and_then(|p| p["containerPort"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("port {name:?} is not a port of the container")),
        other => Err(format!("invalid port {other}")),
    }
}

/// The gRPC health checking protocol (`grpc.health.v1.Health/Check`) over HTTP/2
/// without TLS, as the kubelet's gRPC probe: `Ok` when the service answers `SERVING`.
async fn grpc_health(host: &str, port: u16, service: &str) -> Result<(), String> {
    use http_body_util::{BodyExt, Full};
    let target = format!("{host}:{port}");
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("failed to connect service {target:?}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .map_err(|e| format!("failed to connect service {target:?}: {e}"))?;
    tokio::spawn(conn);
    // HealthCheckRequest { string service = 1 }, in one uncompressed gRPC message.
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        push_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let req = hyper::Request::post(format!("http://{target}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "kube-probe/1.34")
        .body(Full::new(bytes::Bytes::from(framed)))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("rpc error: {e}"))?;
    let headers = resp.headers().clone();
    let collected = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("rpc error: {e}"))?;
    let trailers = collected.trailers().cloned().unwrap_or_default();
    // A failed call may answer with headers only ("trailers-only").
    let grpc_status = trailers
        .get("grpc-status")
        .or_else(|| headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if grpc_status != "0" {
        let desc = trailers
            .get("grpc-message")
            .or_else(|| headers.get("grpc-message"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        return Err(format!(
            "rpc error: code = {} desc = {desc}",
            grpc_code(&grpc_status)
        ));
    }
    let body = collected.to_bytes();
    // HealthCheckResponse { ServingStatus status = 1 } after the 5-byte message header.
    let status = match body.get(5..) {
        Some([0x08, v, ..]) => u64::from(*v),
        _ => 0,
    };
    match status {
        1 => Ok(()),
        s => {
            let name = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
                .get(s as usize)
                .unwrap_or(&"UNKNOWN");
            Err(format!("service unhealthy (responded with {name:?})"))
        }
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A gRPC status code's name, as error messages print it.
fn grpc_code(code: &str) -> &str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    code.parse::<usize>()
        .ok()
        .and_then(|i| NAMES.get(i).copied())
        .unwrap_or("Unknown")
}

/// Runs one probe: `Ok` on success, `Err(why)` on failure. An exec probe runs in the
/// environment `env` and the mount namespace of the container process `pid`.
pub async fn run(
    probe: &Value,
    container: &Value,
    env: &[(String, String)],
    inside: &crate::runtime::Inside,
    host_ip: &str,
) -> Result<(), String> {
    let timeout = Timing::of(probe).timeout;
    match tokio::time::timeout(timeout, act(probe, container, env, inside, host_ip)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "timeout: the probe took longer than {}s",
            timeout.as_secs()
        )),
    }
}

/// Runs a handler (a probe's or a lifecycle hook's: exec, httpGet, tcpSocket, grpc or
/// sleep) once, without a time limit: `Ok` on success, `Err(why)` on failure.
pub async fn act(
    probe: &Value,
    container: &Value,
    env: &[(String, String)],
    inside: &crate::runtime::Inside,
    host_ip: &str,
) -> Result<(), String> {
    {
        if let Some(exec) = probe.get("exec") {
            let argv: Vec<String> = exec["command"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let Some((program, args)) = argv.split_first() else {
                return Err("the exec probe has no command".to_string());
            };
            let dir = container["workingDir"].as_str().map(std::path::Path::new);
            let mut cmd = inside
                .command(program, args, env, dir, false)
                .map_err(|e| format!("enter the container: {e}"))?;
            let out = cmd
                .kill_on_drop(true)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(|e| format!("exec {program:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                let mut text = String::from_utf8_lossy(&out.stdout).to_string();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                Err(text.trim().to_string())
            }
        } else if let Some(http) = probe.get("httpGet") {
            let scheme = http["scheme"]
                .as_str()
                .unwrap_or("HTTP")
                .to_ascii_uppercase();
            if scheme != "HTTP" && scheme != "HTTPS" {
                return Err(format!("unsupported scheme {scheme:?}: use HTTP or HTTPS"));
            }
            let host = http["host"]
                .as_str()
                .filter(|h| !h.is_empty())
                .unwrap_or(host_ip);
            let port = port(http, container)?;
            let path = http["path"].as_str().unwrap_or("/");
            let mut req = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n"
            );
            for h in http["httpHeaders"].as_array().into_iter().flatten() {
                req.push_str(&format!(
                    "{}: {}\r\n",
                    h["name"].as_str().unwrap_or(""),
                    h["value"].as_str().unwrap_or("")
                ));
            }
            req.push_str("\r\n");
            let url = format!("{}://{host}:{port}{path}", scheme.to_ascii_lowercase());
            let tcp = tokio::net::TcpStream::connect((host, port))
                .await
                .map_err(|e| format!("Get \"{url}\": {e}"))?;
            let mut head = vec![0u8; 64];
            let n = if scheme == "HTTPS" {
                // As the kubelet: TLS without verifying the container's certificate.
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("Get \"{url}\": {e}"))?;
                let mut tls =
                    tokio_rustls::TlsConnector::from(crate::types::tls::insecure_client())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("Get \"{url}\": {e}"))?;
                tls.write_all(req.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                tls.read(&mut head).await.map_err(|e| e.to_string())?
            } else {
                let mut tcp = tcp;
                tcp.write_all(req.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                tcp.read(&mut head).await.map_err(|e| e.to_string())?
            };
            let line = String::from_utf8_lossy(&head[..n]).to_string();
            let code: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("not an HTTP answer: {line:?}"))?;
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        } else if let Some(tcp) = probe.get("tcpSocket") {
            let host = tcp["host"]
                .as_str()
                .filter(|h| !h.is_empty())
                .unwrap_or(host_ip);
            let port = port(tcp, container)?;
            tokio::net::TcpStream::connect((host, port))
                .await
                .map(|_| ())
                .map_err(|e| format!("dial tcp {host}:{port}: {e}"))
        } else if let Some(grpc) = probe.get("grpc") {
            let port = grpc["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| format!("invalid gRPC port {}", grpc["port"]))?;
            grpc_health(host_ip, port, grpc["service"].as_str().unwrap_or("")).await
        } else if let Some(sleep) = probe.get("sleep") {
            let secs = sleep["seconds"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok(())
        } else {
            Err("the handler names no action (exec, httpGet, tcpSocket, grpc, sleep)".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[tokio::test(start_paused = true)]
    async fn thresholds_decide_and_initial_delay_counts_from_the_start() {
        let probe = json!({"initialDelaySeconds": 5, "periodSeconds": 2, "failureThreshold": 2, "successThreshold": 2});
        let mut t = Tracker::new(&probe, Duration::from_secs(1));
        assert_eq!(t.due - Instant::now(), Duration::from_secs(4));
        assert_eq!(t.record(true), Outcome::Unchanged);
        assert_eq!(t.record(true), Outcome::Became(true));
        assert_eq!(t.record(false), Outcome::Unchanged);
        assert_eq!(t.result, Some(true));
        assert_eq!(t.record(false), Outcome::Became(false));
        assert_eq!(t.due - Instant::now(), Duration::from_secs(2));
    }

    #[tokio::test]
    async fn https_probes_do_not_verify_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (_ca, ca_key) = crate::api::tls::ensure_ca(dir.path()).unwrap();
        let (chain, key) =
            crate::api::tls::serving_cert(&ca_key, &["127.0.0.1".to_string()]).unwrap();
        let acceptor =
            tokio_rustls::TlsAcceptor::from(crate::api::tls::server_config(&chain, &key).unwrap());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (tcp, _) = l.accept().await.unwrap();
            let mut s = acceptor.accept(tcp).await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            let _ = s.shutdown().await;
        });
        let probe = json!({"httpGet": {"scheme": "HTTPS", "path": "/", "port": p}});
        let c = json!({});
        assert_eq!(
            run(&probe, &c, &[], &Default::default(), "127.0.0.1").await,
            Ok(())
        );
    }

    /// A gRPC health server that answers each call with the next status of `answers`
    /// (a serving status, or an error code in the trailers), recording the services asked.
    async fn grpc_server(answers: Vec<Result<u8, u8>>) -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
        use http_body_util::{BodyExt, StreamBody};
        use hyper::body::Frame;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let seen = asked.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = l.accept().await.unwrap();
                let (answers, seen) = (answers.clone(), seen.clone());
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (answers, seen) = (answers.clone(), seen.clone());
                        async move {
                            assert_eq!(req.uri().path(), "/grpc.health.v1.Health/Check");
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            seen.lock().unwrap().push(body[5..].to_vec());
                            let answer = answers.lock().unwrap().next().unwrap();
                            let mut trailers = hyper::HeaderMap::new();
                            let mut frames: Vec<
                                Result<Frame<bytes::Bytes>, std::convert::Infallible>,
                            > = Vec::new();
                            match answer {
                                Ok(status) => {
                                    frames.push(Ok(Frame::data(bytes::Bytes::from(vec![
                                        0, 0, 0, 0, 2, 0x08, status,
                                    ]))));
                                    trailers.insert("grpc-status", "0".parse().unwrap());
                                }
                                Err(code) => {
                                    trailers
                                        .insert("grpc-status", code.to_string().parse().unwrap());
                                    trailers.insert("grpc-message", "nope".parse().unwrap());
                                }
                            }
                            frames.push(Ok(Frame::trailers(trailers)));
                            let body = StreamBody::new(futures_util::stream::iter(frames));
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(body)
                                    .unwrap(),
                            )
                        }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service),
                );
            }
        });
        (port, asked)
    }

    #[tokio::test]
    async fn grpc_probes_speak_the_health_checking_protocol() {
        let (port, asked) = grpc_server(vec![Ok(1), Ok(2), Err(12)]).await;
        let c = json!({});
        let probe = json!({"grpc": {"port": port, "service": "db"}});
        assert_eq!(
            run(&probe, &c, &[], &Default::default(), "127.0.0.1").await,
            Ok(())
        );
        assert_eq!(
            run(&probe, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .unwrap_err(),
            "service unhealthy (responded with \"NOT_SERVING\")"
        );
        assert_eq!(
            run(&probe, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .unwrap_err(),
            "rpc error: code = Unimplemented desc = nope"
        );
        assert_eq!(asked.lock().unwrap()[0], b"\x0a\x02db");
        let closed = json!({"grpc": {"port": 1}});
        assert!(
            run(&closed, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .unwrap_err()
                .starts_with("failed to connect service \"127.0.0.1:1\"")
        );
    }

    #[tokio::test]
    async fn exec_tcp_and_http_probes() {
        let c = json!({"ports": [{"name": "web", "containerPort": 0}]});
        assert!(
            run(
                &json!({"exec": {"command": ["true"]}}),
                &c,
                &[],
                &Default::default(),
                "127.0.0.1"
            )
            .await
            .is_ok()
        );
        let failed = run(
            &json!({"exec": {"command": ["sh", "-c", "echo nope; exit 1"]}}),
            &c,
            &[],
            &Default::default(),
            "127.0.0.1",
        )
        .await;
        assert_eq!(failed.unwrap_err(), "nope");
        // A listener that answers one HTTP request, then 500 to the next.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            for status in ["200 OK", "500 Internal Server Error", "200 OK"] {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let http = json!({"httpGet": {"path": "/healthz", "port": p}});
        assert!(
            run(&http, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .is_ok()
        );
        assert_eq!(
            run(&http, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .unwrap_err(),
            "HTTP probe failed with statuscode: 500"
        );
        assert!(
            run(
                &json!({"tcpSocket": {"port": p}}),
                &c,
                &[],
                &Default::default(),
                "127.0.0.1"
            )
            .await
            .is_ok()
        );
        let named = json!({"tcpSocket": {"port": "nope"}});
        assert!(
            run(&named, &c, &[], &Default::default(), "127.0.0.1")
                .await
                .unwrap_err()
                .contains("not a port")
        );
    }
}
