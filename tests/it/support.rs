//! Helpers shared by the end-to-end tests.

use std::future::Future;
use std::time::Duration;

use serde_json::json;

/// A small JSON object with a name and a counter.
pub fn object(name: &str, n: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"n": n.to_string(), "pad": "x".repeat(64)},
    }))
    .unwrap()
}

/// Awaits `f`, failing the test if it takes longer than `secs` (a hang, not a slow run).
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("operation hung")
}

/// Checks `check` until it returns `Some`, failing the test after `secs` seconds with
/// `what` and the last value seen. For state that converges (controllers), not for waits.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not true after {secs} s; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}

/// A test's data directory. Dropped, it first ends everything the node agents that ran
/// on it started (every runtime root in it: `pods`, and those of agents run beside a
/// server), as `berth node reset` does, then goes; so a test that fails or forgets its
/// pods leaves nothing running.
pub struct DataDir(tempfile::TempDir);

/// A temporary directory only this user may enter (mode 0700), as `berth serve` requires
/// of its data directory.
pub fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

impl DataDir {
    pub fn new() -> Self {
        DataDir(private_dir())
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// Ends what the runtimes rooted in this directory started.
    pub fn reset(&self) {
        let below = std::fs::read_dir(self.path())
            .into_iter()
            .flatten()
            .flatten();
        let roots = std::iter::once(self.path().to_path_buf()).chain(below.map(|e| e.path()));
        for root in roots {
            if root.join(berth::runtime::reset::ID_FILE).is_file()
                && let Err(e) = berth::runtime::reset::reset(&root)
            {
                eprintln!("could not reset {}: {e}", root.display());
            }
        }
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        self.reset();
    }
}

/// A real berth server on a random loopback port with a temporary data directory, and an
/// HTTPS client that trusts its CA and carries the admin token. Dropped, it closes its
/// node's runtime (every container ends, nothing starts again), even when the test
/// panicked.
pub struct TestServer {
    pub url: String,
    pub token: String,
    pub ca_pem: String,
    pub client: reqwest::Client,
    pub dir: DataDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    runtime: Option<berth::runtime::process::ProcessRuntime>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(rt) = &self.runtime
            && let Err(e) = rt.close()
        {
            eprintln!("could not end the containers of the test's node: {e}");
        }
    }
}

/// The tests' client: HTTP/1.1, or HTTP/2 when `BERTH_TEST_H2` is set (CI runs the
/// end-to-end tests both ways).
pub fn https_client(ca_pem: &str) -> reqwest::Client {
    client_with(ca_pem, std::env::var_os("BERTH_TEST_H2").is_some())
}

/// An HTTP/1.1 client, for upgrades (WebSockets), which HTTP/2 does not carry here.
pub fn https1_client(ca_pem: &str) -> reqwest::Client {
    client_with(ca_pem, false)
}

/// A client that negotiates HTTP/2 (all its requests share one connection).
pub fn https2_client(ca_pem: &str) -> reqwest::Client {
    client_with(ca_pem, true)
}

use crate::https::client_with;

impl TestServer {
    pub async fn start() -> Self {
        Self::start_in(DataDir::new(), |_| {}).await
    }

    pub async fn start_with(tune: impl FnOnce(&mut berth::app::Config)) -> Self {
        Self::start_in(DataDir::new(), tune).await
    }

    /// Starts a server on an existing data directory (for restart tests).
    pub async fn start_in(dir: DataDir, tune: impl FnOnce(&mut berth::app::Config)) -> Self {
        Self::start_at(dir, "127.0.0.1:0", tune).await
    }

    /// Starts a server on an existing data directory listening on `addr`: a restart on
    /// the address of the stopped server, which pods (deployers) already talk to.
    pub async fn start_at(
        dir: DataDir,
        addr: &str,
        tune: impl FnOnce(&mut berth::app::Config),
    ) -> Self {
        let mut config = berth::app::Config::new(dir.path());
        tune(&mut config);
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cluster = berth::app::Cluster::open(&config, addr).await.unwrap();
        let runtime = cluster.runtime();
        let (url, token, ca_pem) = (
            cluster.url.clone(),
            cluster.admin_token.clone(),
            cluster.ca_pem.clone(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            cluster
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            client: https_client(&ca_pem),
            url,
            token,
            ca_pem,
            dir,
            stop: Some(stop),
            task: Some(task),
            runtime,
        }
    }

    /// Stops the server gracefully and hands back its data directory. Its containers run
    /// on (a berth started on the directory adopts them) until the directory is dropped.
    pub async fn stop(mut self) -> DataDir {
        let _ = self.stop.take().unwrap().send(());
        within(30, self.task.take().unwrap()).await.unwrap();
        self.runtime = None;
        std::mem::replace(&mut self.dir, DataDir::new())
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// Sends a request with an optional JSON body; returns the code and the JSON answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut r = self.req(method, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let code = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        });
        (code, v)
    }

    /// Lets the pods of namespace `ns` use the host (host namespaces, `hostPath`, host
    /// ports, privileged containers): labels it for the `privileged` Pod Security level,
    /// as upstream's e2e framework does for such tests.
    pub async fn allow_privileged(&self, ns: &str) {
        let (code, out) = self
            .patch(
                &format!("/api/v1/namespaces/{ns}"),
                "application/merge-patch+json",
                serde_json::json!({"metadata": {"labels": {
                    "pod-security.kubernetes.io/enforce": "privileged"}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
    }

    /// A GET whose answer is text (logs), with its status code.
    pub async fn text(&self, path: &str) -> (u16, String) {
        let resp = self.req(reqwest::Method::GET, path).send().await.unwrap();
        let code = resp.status().as_u16();
        (code, resp.text().await.unwrap())
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    pub async fn patch(
        &self,
        path: &str,
        content_type: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let resp = self
            .req(reqwest::Method::PATCH, path)
            .header("Content-Type", content_type)
            .body(serde_json::to_vec(&body).unwrap())
            .send()
            .await
            .unwrap();
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap())
    }

    /// A GET answered as a server-side Table, as kubectl asks for it.
    pub async fn table(&self, path: &str) -> serde_json::Value {
        let resp = self
            .req(reqwest::Method::GET, path)
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "table of {path}");
        resp.json().await.unwrap()
    }

    /// The (reason, message) of each event about the object `name` of `default`.
    pub async fn events_of(&self, name: &str) -> Vec<(String, String)> {
        let (_, events) = self
            .get(&format!(
                "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
            ))
            .await;
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let text = |f: &str| e[f].as_str().unwrap_or("").to_string();
                (text("reason"), text("message"))
            })
            .collect()
    }

    /// Opens a watch and returns a reader of its events.
    pub async fn watch(&self, path: &str) -> WatchReader {
        let resp = self.req(reqwest::Method::GET, path).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "watch {path}");
        WatchReader::new(resp)
    }
}

/// Reads newline-delimited watch events.
pub struct WatchReader {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl WatchReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            stream: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        }
    }

    /// The next event, or `None` when the server ended the stream.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        use futures_util::StreamExt;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("each line is one JSON event"));
            }
            match within(20, self.stream.next()).await {
                Some(chunk) => self.buf.extend_from_slice(&chunk.unwrap()),
                None => return None,
            }
        }
    }

    /// The next event that is not a bookmark.
    pub async fn next_change(&mut self) -> serde_json::Value {
        loop {
            let e = self.next().await.expect("the watch is still open");
            if e["type"] != "BOOKMARK" {
                return e;
            }
        }
    }
}

/// What a run of the `berth` binary printed and how it ended.
#[derive(Debug)]
pub struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Checks that a run of `berth` succeeded and printed `stdout`.
#[track_caller]
pub fn ok(run: &CliRun, stdout: &str) {
    assert_eq!((run.code, run.stdout.as_str()), (0, stdout), "{run:?}");
}

/// Checks that a run of `berth` failed with exit code 1 and printed `stderr`.
#[track_caller]
pub fn fails(run: &CliRun, stderr: &str) {
    assert_eq!((run.code, run.stderr.as_str()), (1, stderr), "{run:?}");
}

impl TestServer {
    /// The kubeconfig `berth serve` wrote for this server.
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs `berth ARGS` as a client of this server, as a user would with `KUBECONFIG`
    /// pointing at the server's kubeconfig.
    pub async fn berth(&self, args: &[&str]) -> CliRun {
        let o = within(
            120,
            tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
                .args(args)
                .env("KUBECONFIG", self.kubeconfig())
                .env_remove("BERTH_LOG")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap();
        CliRun {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// The names of a Table's columns.
/// The fields of the causes of a `Status` (a 422's `details.causes`), in order.
pub fn cause_fields(status: &serde_json::Value) -> Vec<&str> {
    status["details"]["causes"]
        .as_array()
        .map(|causes| causes.iter().filter_map(|c| c["field"].as_str()).collect())
        .unwrap_or_default()
}

pub fn column_names(table: &serde_json::Value) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}
