//! The node agent's own endpoints (`/healthz`, `/pods`, `/runningpods`,
//! `/containerLogs/...`, `/exec/...`, `/run/...`, `/portForward/...`, `/podStatus`),
//! served in-process under
//! the node proxy subresource `/api/v1/nodes/{node}/proxy/{path}` (admins only). Their
//! answers are the kubelet's: plain-text errors with the kubelet's texts and codes. A pod
//! uid in a path or query may be a mirror pod's: it is translated to its static pod's.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::SinkExt;
use serde_json::{Value, json};

use super::exec::{self, ExecContext};
use super::logs::NodeAccess;

/// What the endpoints need of the node agent.
pub trait Agent: Send + Sync {
    /// The node this agent runs.
    fn node_name(&self) -> &str;
    /// Whether the agent's loop goes round (an error message when not).
    fn healthy(&self) -> Result<(), String>;
    /// The pods the agent should run (desired state).
    fn pods(&self) -> Vec<Value>;
    /// The pods the runtime runs: names, uids, containers.
    fn running_pods(&self) -> Vec<Value>;
    /// A pod the agent should run, by namespace and name.
    fn pod(&self, namespace: &str, name: &str) -> Option<Value>;
    /// The uid the agent knows a pod by (a mirror pod's uid is its static pod's).
    fn translate_uid(&self, uid: &str) -> String;
    /// The pod's status as its containers are now.
    fn pod_status(&self, pod: &Value) -> Value;

    /// The network namespace of pod `uid`'s sandbox (`/proc/PID/ns/net`), when the pod
    /// has a network of its own: port forwarding connects from inside it.
    fn pod_netns(&self, _uid: &str) -> Option<std::path::PathBuf> {
        None
    }
}

/// One request to the agent, after the node and the user were checked.
pub struct Request<'a> {
    pub agent: &'a Arc<dyn Agent>,
    pub node: Option<&'a Arc<dyn NodeAccess>>,
    pub method: Method,
    /// The path below `proxy/`, without its leading slash.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub ws: Option<exec::Upgrade>,
    /// The request's head, for the upgrades an endpoint reads itself (port forwarding).
    pub parts: Option<axum::http::request::Parts>,
}

/// A plain-text answer, as Go's `http.Error` writes it.
fn text(code: StatusCode, message: &str) -> Response {
    let mut r = (code, format!("{message}\n")).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json_answer(body: &Value) -> Response {
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn pod_list(items: Vec<Value>) -> Value {
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// Serves one agent endpoint.
pub async fn serve(req: Request<'_>) -> Response {
    let segments: Vec<&str> = req.path.split('/').collect();
    match (&req.method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => match req.agent.healthy() {
            Ok(()) => text(StatusCode::OK, "ok"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        (&Method::GET, ["pods"] | ["pods", ""]) => json_answer(&pod_list(req.agent.pods())),
        (&Method::GET, ["runningpods"] | ["runningpods", ""]) => {
            json_answer(&pod_list(req.agent.running_pods()))
        }
        (&Method::GET, ["podStatus"]) => pod_status(&req),
        (&Method::GET, ["containerLogs", rest @ ..]) => container_logs(&req, rest),
        (&Method::GET | &Method::POST, ["exec", ..]) => exec_in(req),
        (&Method::POST, ["run", ..]) => run_in(&req).await,
        (&Method::GET | &Method::POST, ["portForward", rest @ ..]) => port_forward(req, rest).await,
        (_, [endpoint, ..])
            if matches!(
                *endpoint,
                "healthz"
                    | "pods"
                    | "runningpods"
                    | "podStatus"
                    | "containerLogs"
                    | "run"
                    | "portForward"
            ) =>
        {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
            let allow = match *endpoint {
                "run" => "POST",
                "portForward" => "GET, POST",
                _ => "GET",
            };
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            r
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn first<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `/podStatus?podNamespace=&podID=[&UID=]`: the status computed from the runtime now.
fn pod_status(req: &Request<'_>) -> Response {
    let q = query_pairs(req.query);
    let name = first(&q, "podID").unwrap_or("");
    let ns = first(&q, "podNamespace").unwrap_or("");
    if name.is_empty() {
        return text(StatusCode::BAD_REQUEST, "Missing 'podID=' query entry.");
    }
    if ns.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "Missing 'podNamespace=' query entry.",
        );
    }
    let uid = first(&q, "UID").unwrap_or("");
    match find_pod(req.agent.as_ref(), ns, name, uid) {
        Some(pod) => json_answer(&req.agent.pod_status(&pod)),
        None => text(StatusCode::NOT_FOUND, "Pod does not exist"),
    }
}

/// The pod by namespace and name; when a uid is given (a mirror pod's will do), it must
/// be that pod's.
fn find_pod(agent: &dyn Agent, ns: &str, name: &str, uid: &str) -> Option<Value> {
    let pod = agent.pod(ns, name)?;
    if !uid.is_empty() && pod["metadata"]["uid"].as_str() != Some(&agent.translate_uid(uid)) {
        return None;
    }
    Some(pod)
}

/// `<namespace>/<pod>[/<uid>]/<container>` of an exec or run path.
fn coordinates<'a>(path: &str, rest: &[&'a str]) -> Result<[&'a str; 4], Box<Response>> {
    match rest {
        [ns, pod, container] if ![ns, pod, container].iter().any(|s| s.is_empty()) => {
            Ok([ns, pod, "", container])
        }
        [ns, pod, uid, container] if ![ns, pod, uid, container].iter().any(|s| s.is_empty()) => {
            Ok([ns, pod, uid, container])
        }
        _ => Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            &format!(
                "Unexpected path /{path}. Expected /.../.../<namespace>/<pod>/<container> or /.../.../<namespace>/<pod>/<uid>/<container>"
            ),
        ))),
    }
}

fn exec_context(req: &Request<'_>, pod: &Value, container: &str) -> Option<ExecContext> {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    req.node?.exec_context(uid, container)
}

/// `/run/...?cmd=`: runs `cmd` (split on spaces) beside the container and answers its
/// combined output; a command that fails is a 500 with that output.
async fn run_in(req: &Request<'_>) -> Response {
    let segments: Vec<&str> = req.path.split('/').skip(1).collect();
    let [ns, name, uid, container] = match coordinates(req.path, &segments) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let Some(pod) = find_pod(req.agent.as_ref(), ns, name, uid) else {
        return text(StatusCode::NOT_FOUND, "Pod does not exist");
    };
    let q = query_pairs(req.query);
    let argv: Vec<String> = first(&q, "cmd")
        .unwrap_or("")
        .split(' ')
        .map(str::to_string)
        .collect();
    let Some(ctx) = exec_context(req, &pod, container) else {
        let e = format!("container not found ({container:?})");
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Internal Error: {e}"),
        );
    };
    match combined_output(&argv, &ctx).await {
        Ok(out) => {
            let mut r = (StatusCode::OK, out).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Internal Error: {e}"),
        ),
    }
}

/// Runs `argv` in a container's environment to the end; stdout and stderr through one
/// pipe, so their output interleaves as written. A non-zero exit is an error.
async fn combined_output(argv: &[String], ctx: &ExecContext) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let (program, args) = argv
        .split_first()
        .filter(|(p, _)| !p.is_empty())
        .ok_or_else(|| std::io::Error::other("no command given"))?;
    let (writer, mut reader) = tokio::net::unix::pipe::pipe()?;
    let writer = writer.into_blocking_fd()?;
    let mut cmd = ctx
        .inside
        .command(program, args, &ctx.env, ctx.working_dir.as_deref(), false)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("exec {program:?}: {e}")))?;
    // The command holds the pipe's writing end: without it, the reader sees the end.
    drop(cmd);
    let mut out = Vec::new();
    reader.read_to_end(&mut out).await?;
    let status = child.wait().await?;
    match status.code() {
        Some(0) => Ok(out),
        code => {
            // As the kubelet words a failed command.
            let quoted: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
            Err(std::io::Error::other(format!(
                "command [{}] exited with {}: {}",
                quoted.join(" "),
                code.unwrap_or(137),
                String::from_utf8_lossy(&out)
            )))
        }
    }
}

/// `/exec/...`: the checks, then the same WebSocket exec as `pods/{name}/exec`.
fn exec_in(req: Request<'_>) -> Response {
    let segments: Vec<&str> = req.path.split('/').skip(1).collect();
    let [ns, name, uid, container] = match coordinates(req.path, &segments) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let Some(pod) = find_pod(req.agent.as_ref(), ns, name, uid) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let asked = exec::Request::parse(req.query);
    if let Err(e) = asked.check_streams() {
        return text(StatusCode::BAD_REQUEST, &e.to_string());
    }
    if asked.command.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container",
        );
    }
    let ctx = exec_context(&req, &pod, container);
    let Some(mut ws) = req.ws else {
        return text(
            StatusCode::BAD_REQUEST,
            "exec needs a WebSocket upgrade offering v5.channel.k8s.io",
        );
    };
    match ctx {
        Some(ctx) => exec::serve(ws, exec::Session::new(asked, ctx)),
        None => {
            // As the kubelet: the stream opens, the error comes on channel 3.
            let protocol = match ws.negotiate() {
                Ok(p) => p,
                Err(e) => return e.into_response(),
            };
            let status = exec::failure(format!("container not found ({container:?})"));
            ws.ws
                .on_upgrade(move |mut socket| async move {
                    if let Some(frame) = protocol.status(&status) {
                        let _ = socket.send(frame).await;
                    }
                    let _ = socket.close().await;
                })
                .into_response()
        }
    }
}

/// `/portForward/{namespace}/{pod}[/{uid}]`: the same port forwarding as
/// `pods/{name}/portforward` (see [`super::portforward`]), the ports of the channel
/// protocol in `port`.
async fn port_forward(req: Request<'_>, rest: &[&str]) -> Response {
    let (ns, name, uid) = match *rest {
        [ns, name] if !ns.is_empty() && !name.is_empty() => (ns, name, ""),
        [ns, name, uid] if !ns.is_empty() && !name.is_empty() => (ns, name, uid),
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Unexpected path /{}. Expected /portForward/<namespace>/<pod> or /portForward/<namespace>/<pod>/<uid>",
                    req.path
                ),
            );
        }
    };
    let Some(mut pod) = find_pod(req.agent.as_ref(), ns, name, uid) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    if pod["status"]["podIP"].as_str().unwrap_or("").is_empty() {
        pod["status"] = req.agent.pod_status(&pod);
    }
    let Some(mut parts) = req.parts else {
        return text(StatusCode::BAD_REQUEST, "port forwarding needs an upgrade");
    };
    let netns = req
        .agent
        .pod_netns(crate::types::json::str_at(&pod, "/metadata/uid"));
    let target = super::portforward::Target::new(pod).with_netns(netns);
    match super::portforward::serve(&mut parts, req.query, target).await {
        Ok(r) => r,
        Err(e) => {
            let (code, status) = e.status();
            text(code, status["message"].as_str().unwrap_or(""))
        }
    }
}

/// A `{"message": ...}` error of `/containerLogs`, as the kubelet writes them.
fn log_error(code: StatusCode, message: &str) -> Response {
    text(code, &format!("{{\"message\": \"{message}\"}}"))
}

/// `/containerLogs/{namespace}/{pod}/{container}`: through the same log reader as
/// `pods/{name}/log`.
fn container_logs(req: &Request<'_>, rest: &[&str]) -> Response {
    let part = |i: usize| rest.get(i).copied().unwrap_or("");
    let (ns, name, container) = (part(0), part(1), part(2));
    if name.is_empty() {
        return log_error(StatusCode::BAD_REQUEST, "Missing podID.");
    }
    if container.is_empty() {
        return log_error(StatusCode::BAD_REQUEST, "Missing container name.");
    }
    if ns.is_empty() {
        return log_error(StatusCode::BAD_REQUEST, "Missing podNamespace.");
    }
    let query = match log_query(&query_pairs(req.query)) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let Some(pod) = req.agent.pod(ns, name) else {
        return text(
            StatusCode::NOT_FOUND,
            &format!("pod {:?} does not exist", format!("{name}_{ns}")),
        );
    };
    let known = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod["spec"][*k].as_array())
        .flatten()
        .any(|c| c["name"] == container);
    if !known {
        return text(
            StatusCode::NOT_FOUND,
            &format!("container {container:?} not found in pod {name:?}"),
        );
    }
    let mut query = query;
    query.insert("container".into(), container.to_string());
    match super::logs::serve(req.node.map(|n| &**n), &pod, &query) {
        Ok(r) => r,
        Err(e) => {
            let (code, status) = e.status();
            text(code, status["message"].as_str().unwrap_or(""))
        }
    }
}

/// The log options of a `/containerLogs` query, checked as the kubelet checks them.
fn log_query(pairs: &[(String, String)]) -> Result<HashMap<String, String>, Box<Response>> {
    let undecodable = || {
        Box::new(log_error(
            StatusCode::BAD_REQUEST,
            "Unable to decode query.",
        ))
    };
    let invalid = || {
        Box::new(log_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid request.",
        ))
    };
    let mut q: HashMap<String, String> = HashMap::new();
    for (k, v) in pairs {
        match k.as_str() {
            "follow" | "previous" | "timestamps" => {
                let on = match v.as_str() {
                    "" | "1" | "true" | "True" | "t" => true,
                    "0" | "false" | "False" | "f" => false,
                    _ => return Err(undecodable()),
                };
                q.insert(k.clone(), on.to_string());
            }
            "sinceSeconds" | "tailLines" | "limitBytes" => {
                let n: i64 = v.parse().map_err(|_| undecodable())?;
                q.insert(k.clone(), n.to_string());
            }
            // The legacy name of tailLines; `all` means no limit.
            "tail" if v == "all" => {}
            "tail" => {
                let n: i64 = v.parse().map_err(|_| undecodable())?;
                q.insert("tailLines".into(), n.to_string());
            }
            "sinceTime" => {
                v.parse::<jiff::Timestamp>().map_err(|_| undecodable())?;
                q.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
    let num = |k: &str| q.get(k).and_then(|v| v.parse::<i64>().ok());
    if num("tailLines").is_some_and(|n| n < 0)
        || num("limitBytes").is_some_and(|n| n < 1)
        || num("sinceSeconds").is_some_and(|n| n < 1)
        || (q.contains_key("sinceSeconds") && q.contains_key("sinceTime"))
    {
        return Err(invalid());
    }
    Ok(q)
}

/// Reads a whole answer body (for tests).
#[cfg(test)]
async fn body_text(r: Response) -> (StatusCode, String) {
    let code = r.status();
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;

    impl Agent for Fake {
        fn node_name(&self) -> &str {
            "n1"
        }
        fn healthy(&self) -> Result<(), String> {
            Ok(())
        }
        fn pods(&self) -> Vec<Value> {
            vec![self.pod("default", "web-n1").unwrap()]
        }
        fn running_pods(&self) -> Vec<Value> {
            Vec::new()
        }
        fn pod(&self, ns: &str, name: &str) -> Option<Value> {
            (ns == "default" && name == "web-n1").then(|| {
                json!({"metadata": {"name": name, "namespace": ns, "uid": "static"},
                       "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
            })
        }
        fn translate_uid(&self, uid: &str) -> String {
            if uid == "mirror" { "static" } else { uid }.to_string()
        }
        fn pod_status(&self, _: &Value) -> Value {
            json!({"phase": "Running"})
        }
    }

    async fn call(method: Method, path_and_query: &str) -> (StatusCode, String) {
        let agent: Arc<dyn Agent> = Arc::new(Fake);
        let (path, query) = path_and_query
            .split_once('?')
            .map_or((path_and_query, None), |(p, q)| (p, Some(q)));
        let r = serve(Request {
            agent: &agent,
            node: None,
            method,
            path,
            query,
            ws: None,
            parts: None,
        })
        .await;
        body_text(r).await
    }

    #[tokio::test]
    async fn pod_status_answers_with_the_kubelet_texts() {
        let (code, body) = call(Method::GET, "podStatus?podNamespace=default").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::BAD_REQUEST, "Missing 'podID=' query entry.\n")
        );
        let (code, body) = call(Method::GET, "podStatus?podID=web-n1").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "Missing 'podNamespace=' query entry.\n"
            )
        );
        let (code, body) = call(Method::GET, "podStatus?podID=nope&podNamespace=default").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::NOT_FOUND, "Pod does not exist\n")
        );
        let (code, body) = call(
            Method::GET,
            "podStatus?podID=web-n1&podNamespace=default&UID=mirror",
        )
        .await;
        assert_eq!(code, StatusCode::OK, "a mirror uid names its static pod");
        assert_eq!(body, r#"{"phase":"Running"}"#);
        let (code, _) = call(
            Method::GET,
            "podStatus?podID=web-n1&podNamespace=default&UID=other",
        )
        .await;
        assert_eq!(code, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn exec_and_run_check_their_paths_and_pods() {
        let (code, body) = call(Method::POST, "run/default/web-n1").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(body.starts_with("Unexpected path /run/default/web-n1. Expected /.../.../<namespace>/<pod>/<container> or"), "{body}");
        let (code, body) = call(Method::POST, "run/default/nope/c?cmd=true").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::NOT_FOUND, "Pod does not exist\n")
        );
        let (code, body) = call(Method::POST, "run/default/web-n1/other/c?cmd=true").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::NOT_FOUND, "Pod does not exist\n")
        );
        let (code, body) = call(Method::POST, "run/default/web-n1/mirror/c?cmd=true").await;
        assert_eq!(
            code,
            StatusCode::INTERNAL_SERVER_ERROR,
            "found, but no runtime here"
        );
        assert_eq!(body, "Internal Error: container not found (\"c\")\n");
        let (code, body) = call(Method::GET, "exec/default/nope/c?command=true&stdout=1").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::NOT_FOUND, "pod does not exist\n")
        );
        let (code, body) = call(Method::GET, "exec/default/web-n1/c?command=true").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            "you must specify at least 1 of stdin, stdout, stderr\n"
        );
        let (code, _) = call(Method::GET, "run/default/web-n1/c").await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
        let (code, _) = call(Method::GET, "nothing").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn port_forward_checks_its_path_and_pod() {
        let (code, body) = call(Method::GET, "portForward/default").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(
            body.starts_with("Unexpected path /portForward/default."),
            "{body}"
        );
        let (code, body) = call(Method::POST, "portForward/default/nope").await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::NOT_FOUND, "pod does not exist\n")
        );
        let (code, _) = call(Method::GET, "portForward/default/web-n1/other").await;
        assert_eq!(code, StatusCode::NOT_FOUND, "another pod's uid");
        let (code, body) = call(Method::GET, "portForward/default/web-n1/mirror").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "port forwarding needs an upgrade\n"
            )
        );
        let (code, _) = call(Method::DELETE, "portForward/default/web-n1").await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn container_logs_check_their_parts_and_options() {
        let (code, body) = call(Method::GET, "containerLogs/default//c").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "{\"message\": \"Missing podID.\"}\n"
            )
        );
        let (code, body) = call(Method::GET, "containerLogs/default/web-n1").await;
        assert_eq!(body, "{\"message\": \"Missing container name.\"}\n");
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let (_, body) = call(Method::GET, "containerLogs//web-n1/c").await;
        assert_eq!(body, "{\"message\": \"Missing podNamespace.\"}\n");
        let (code, body) = call(Method::GET, "containerLogs/default/web-n1/c?tailLines=x").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "{\"message\": \"Unable to decode query.\"}\n"
            )
        );
        let (code, body) = call(Method::GET, "containerLogs/default/web-n1/c?tailLines=-1").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "{\"message\": \"Invalid request.\"}\n"
            )
        );
        let (code, body) = call(Method::GET, "containerLogs/default/nope/c").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::NOT_FOUND,
                "pod \"nope_default\" does not exist\n"
            )
        );
        let (code, body) = call(Method::GET, "containerLogs/default/web-n1/x").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::NOT_FOUND,
                "container \"x\" not found in pod \"web-n1\"\n"
            )
        );
        let (code, body) = call(Method::GET, "containerLogs/default/web-n1/c?tail=all").await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "no instance yet");
        assert_eq!(
            body,
            "container \"c\" in pod \"web-n1\" is waiting to start: ContainerCreating\n"
        );
    }
}
