//! The HTTPS transport: the Kubernetes REST API with a bearer token, trusting one CA.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};

use super::{DeleteParams, Error, Event, ListParams, ObjectList, Propagation, Result, WatchParams};
use crate::registry::{Patch, Resource};

#[derive(Clone)]
pub(super) struct Http {
    client: reqwest::Client,
    base: Arc<str>,
    auth: Arc<str>,
    /// How long to keep trying to reach a server that refuses connections (restarting);
    /// none by default.
    reconnect: std::time::Duration,
}

/// The first pause before connecting again, doubled up to [`RECONNECT_PAUSE_MAX`].
const RECONNECT_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
const RECONNECT_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(2);

fn transport(e: reqwest::Error) -> Error {
    Error::Transport(format!("request failed: {e}"))
}

/// A client configuration trusting the CA certificates in `ca_pem`.
pub(crate) fn tls_config(ca_pem: &str) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| Error::Transport(format!("read the CA certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Error::Transport(format!("use the CA certificate: {e}")))?;
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Transport(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

/// The error a non-success answer stands for, from its `Status` body.
pub(crate) fn status_error(code: StatusCode, body: &[u8]) -> Error {
    let status: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = status["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    match (code.as_u16(), status["reason"].as_str().unwrap_or("")) {
        (404, _) => Error::NotFound(message),
        (409, "AlreadyExists") => Error::AlreadyExists(message),
        (409, _) => Error::Conflict(message),
        (422, _) => Error::Invalid(message),
        (400, _) => Error::BadRequest(message),
        (401, _) => Error::Unauthorized(message),
        (403, _) => Error::Forbidden(message),
        (410, _) => Error::Gone(message),
        (429, _) => Error::TooManyRequests(message),
        (code, _) => Error::Server { code, message },
    }
}

pub(super) fn collection_path(res: &Resource, ns: Option<&str>) -> String {
    let root = if res.group.is_empty() {
        format!("/api/{}", res.version)
    } else {
        format!("/apis/{}/{}", res.group, res.version)
    };
    match ns {
        Some(ns) if res.namespaced => format!("{root}/namespaces/{ns}/{}", res.plural),
        _ => format!("{root}/{}", res.plural),
    }
}

fn selection_query(p: &ListParams) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    if let Some(l) = p.label_selector.as_deref().filter(|s| !s.is_empty()) {
        q.push(("labelSelector", l.to_string()));
    }
    if let Some(f) = p.field_selector.as_deref().filter(|s| !s.is_empty()) {
        q.push(("fieldSelector", f.to_string()));
    }
    q
}

impl Http {
    pub(super) fn new(url: &str, ca_pem: &str, token: &str) -> Result<Self> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config(ca_pem)?)
            .build()
            .map_err(transport)?;
        Ok(Http {
            client,
            base: url.trim_end_matches('/').into(),
            auth: format!("Bearer {token}").into(),
            reconnect: std::time::Duration::ZERO,
        })
    }

    pub(super) fn set_reconnect(&mut self, budget: std::time::Duration) {
        self.reconnect = budget;
    }

    /// Sends a request, sending it again while the server cannot be connected to (the
    /// request never reached it, so any request may be sent again) and the reconnect
    /// budget lasts.
    async fn connect_and_send(&self, mut req: RequestBuilder) -> Result<reqwest::Response> {
        if self.reconnect.is_zero() {
            // Most clients fail at once: no copy of the request is kept.
            return req.send().await.map_err(transport);
        }
        let deadline = tokio::time::Instant::now() + self.reconnect;
        let mut pause = RECONNECT_PAUSE;
        loop {
            let again = req.try_clone();
            match req.send().await {
                Err(e) if e.is_connect() && tokio::time::Instant::now() < deadline => {
                    let Some(next) = again else {
                        return Err(transport(e));
                    };
                    tracing::debug!(error = %e, retry_in_ms = pause.as_millis() as u64,
                        "the server cannot be reached; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                    req = next;
                }
                other => return other.map_err(transport),
            }
        }
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.request_accepting(method, path, "application/json")
    }

    /// A request asking for `accept`, sent once: a second `Accept` header would be
    /// ignored by the server.
    fn request_accepting(&self, method: Method, path: &str, accept: &str) -> RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header(reqwest::header::AUTHORIZATION, &*self.auth)
            .header(reqwest::header::ACCEPT, accept)
    }

    async fn send(&self, req: RequestBuilder) -> Result<Value> {
        let resp = self.connect_and_send(req).await?;
        let code = resp.status();
        let body = resp.bytes().await.map_err(transport)?;
        if !code.is_success() {
            return Err(status_error(code, &body));
        }
        serde_json::from_slice(&body)
            .map_err(|e| Error::Transport(format!("the server's answer is not JSON: {e}")))
    }

    fn object_path(res: &Resource, ns: Option<&str>, name: &str, sub: Option<&str>) -> String {
        let mut p = format!("{}/{name}", collection_path(res, ns));
        if let Some(sub) = sub {
            p.push('/');
            p.push_str(sub);
        }
        p
    }

    /// The kinds that definitions add, as discovery lists them: every resource of the
    /// groups that no built-in kind serves.
    pub(super) async fn custom_resources(&self) -> Result<Vec<std::sync::Arc<Resource>>> {
        let builtin: Vec<&str> = crate::registry::catalog::RESOURCES
            .iter()
            .map(|r| r.group.as_str())
            .collect();
        let groups = self.send(self.request(Method::GET, "/apis")).await?;
        let mut out = Vec::new();
        for g in groups["groups"].as_array().into_iter().flatten() {
            let name = g["name"].as_str().unwrap_or("");
            if builtin.contains(&name) {
                continue;
            }
            for v in g["versions"].as_array().into_iter().flatten() {
                let version = v["version"].as_str().unwrap_or("");
                let list = match self
                    .send(self.request(Method::GET, &format!("/apis/{name}/{version}")))
                    .await
                {
                    Ok(list) => list,
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(e),
                };
                for r in list["resources"].as_array().into_iter().flatten() {
                    let plural = r["name"].as_str().unwrap_or("");
                    // Subresources (`crontabs/status`) are not kinds.
                    if plural.is_empty() || plural.contains('/') {
                        continue;
                    }
                    out.push(std::sync::Arc::new(Resource::identity(
                        name,
                        version,
                        r["kind"].as_str().unwrap_or(""),
                        plural,
                        r["namespaced"] == true,
                    )));
                }
            }
        }
        Ok(out)
    }

    /// The resource as discovery lists it.
    pub(super) async fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<Option<std::sync::Arc<Resource>>> {
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let list = match self.send(self.request(Method::GET, &path)).await {
            Ok(list) => list,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let found = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["name"] == plural);
        Ok(found.map(|r| {
            std::sync::Arc::new(Resource::identity(
                group,
                version,
                r["kind"].as_str().unwrap_or(""),
                plural,
                r["namespaced"] == true,
            ))
        }))
    }

    pub(super) async fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        self.send(self.request(Method::GET, &Self::object_path(res, ns, name, None)))
            .await
    }

    pub(super) async fn list(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList> {
        let mut list = self
            .send(
                self.request(Method::GET, &collection_path(res, ns))
                    .query(&selection_query(params)),
            )
            .await?;
        let items = match list["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        // Lists leave out each item's kind; put it back as the registry has it.
        let items = items
            .into_iter()
            .map(|mut o| {
                if o.is_object() {
                    o["apiVersion"] = json!(res.api_version());
                    o["kind"] = json!(res.kind_name);
                }
                o
            })
            .collect();
        Ok(ObjectList {
            items,
            resource_version: list
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    pub(super) async fn create(
        &self,
        res: &Resource,
        ns: Option<&str>,
        obj: &Value,
    ) -> Result<Value> {
        self.send(
            self.request(Method::POST, &collection_path(res, ns))
                .json(obj),
        )
        .await
    }

    pub(super) async fn update(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
        status: bool,
    ) -> Result<Value> {
        let sub = status.then_some("status");
        self.send(
            self.request(Method::PUT, &Self::object_path(res, ns, name, sub))
                .json(obj),
        )
        .await
    }

    pub(super) async fn patch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<Value> {
        let (content_type, body) = match patch {
            Patch::Merge(v) => ("application/merge-patch+json", v),
            Patch::Json(v) => ("application/json-patch+json", v),
            Patch::Strategic(v) => ("application/strategic-merge-patch+json", v),
        };
        let sub = status.then_some("status");
        self.send(
            self.request(Method::PATCH, &Self::object_path(res, ns, name, sub))
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(serde_json::to_vec(body).expect("JSON serializes")),
        )
        .await
    }

    pub(super) async fn delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Value> {
        let mut body = json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(p) = params.propagation {
            body["propagationPolicy"] = json!(match p {
                Propagation::Background => "Background",
                Propagation::Foreground => "Foreground",
                Propagation::Orphan => "Orphan",
            });
        }
        let mut pre = json!({});
        if let Some(uid) = &params.uid {
            pre["uid"] = json!(uid);
        }
        if let Some(rv) = &params.resource_version {
            pre["resourceVersion"] = json!(rv);
        }
        if pre.as_object().is_some_and(|m| !m.is_empty()) {
            body["preconditions"] = pre;
        }
        if let Some(g) = params.grace_period_seconds {
            body["gracePeriodSeconds"] = json!(g);
        }
        self.send(
            self.request(Method::DELETE, &Self::object_path(res, ns, name, None))
                .json(&body),
        )
        .await
    }

    pub(super) async fn act(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        body: &Value,
    ) -> Result<Value> {
        let method = match res.subresources.iter().find(|s| s.name == sub) {
            Some(s) if s.method() == "PUT" => Method::PUT,
            _ => Method::POST,
        };
        let req = self
            .request(method, &Self::object_path(res, ns, name, Some(sub)))
            .json(body);
        let resp = self.connect_and_send(req).await?;
        let code = resp.status();
        let body = resp.bytes().await.map_err(transport)?;
        if !code.is_success() {
            return Err(status_error(code, &body));
        }
        if body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body)
            .map_err(|e| Error::Transport(format!("the server's answer is not JSON: {e}")))
    }

    /// Sets `spec.replicas` through the `scale` subresource.
    pub(super) async fn scale(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        replicas: i64,
    ) -> Result<Value> {
        let body = json!({"spec": {"replicas": replicas}});
        self.send(
            self.request(
                Method::PATCH,
                &Self::object_path(res, ns, name, Some("scale")),
            )
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/merge-patch+json",
            )
            .body(serde_json::to_vec(&body).expect("JSON serializes")),
        )
        .await
    }

    /// The log of a pod's container (`pods/log`), as a byte stream.
    pub(super) async fn logs(
        &self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        follow: bool,
    ) -> Result<LogStream> {
        let res = crate::registry::catalog::of(crate::registry::Kind::Pod);
        let mut q: Vec<(&str, String)> = Vec::new();
        if let Some(c) = container {
            q.push(("container", c.to_string()));
        }
        if follow {
            q.push(("follow", "true".into()));
        }
        let resp = self
            .request(
                Method::GET,
                &Self::object_path(res, Some(ns), pod, Some("log")),
            )
            .query(&q);
        let resp = self.streamed(resp).await?;
        Ok(LogStream {
            body: Box::pin(resp.bytes_stream()),
        })
    }

    /// Any request by path: `body` goes as JSON (or as `content_type` when given),
    /// `accept` replaces `application/json`. The answer's body when it succeeded.
    pub(super) async fn raw(&self, req: &super::RawRequest<'_>) -> Result<Bytes> {
        self.raw_warned(req).await.map(|(body, _)| body)
    }

    /// [`Http::raw`], with the texts of the answer's `Warning` headers.
    pub(super) async fn raw_warned(
        &self,
        req: &super::RawRequest<'_>,
    ) -> Result<(Bytes, Vec<String>)> {
        let accept = req.accept.unwrap_or("application/json");
        let mut r = self
            .request_accepting(req.method.clone(), req.path, accept)
            .query(req.query);
        if let Some(body) = req.body {
            r = r
                .header(
                    reqwest::header::CONTENT_TYPE,
                    req.content_type.unwrap_or("application/json"),
                )
                .body(serde_json::to_vec(body).expect("JSON serializes"));
        }
        let resp = self.connect_and_send(r).await?;
        let code = resp.status();
        let warnings = resp
            .headers()
            .get_all(reqwest::header::WARNING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(warning_text)
            .collect();
        let body = resp.bytes().await.map_err(transport)?;
        if !code.is_success() {
            return Err(status_error(code, &body));
        }
        Ok((body, warnings))
    }

    /// A GET by path whose answer streams (logs, watches).
    pub(super) async fn raw_stream(
        &self,
        path: &str,
        query: &[(&str, String)],
        accept: Option<&str>,
    ) -> Result<LogStream> {
        let accept = accept.unwrap_or("application/json");
        let req = self
            .request_accepting(Method::GET, path, accept)
            .query(query);
        let resp = self.streamed(req).await?;
        Ok(LogStream {
            body: Box::pin(resp.bytes_stream()),
        })
    }

    /// Sends a request whose answer streams: the response when it succeeded, else the
    /// error its `Status` stands for.
    async fn streamed(&self, req: RequestBuilder) -> Result<reqwest::Response> {
        let resp = self.connect_and_send(req).await?;
        let code = resp.status();
        if !code.is_success() {
            let body = resp.bytes().await.map_err(transport)?;
            return Err(status_error(code, &body));
        }
        Ok(resp)
    }

    pub(super) async fn watch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &WatchParams,
    ) -> Result<Events> {
        let mut q = selection_query(&params.selection);
        q.push(("watch", "true".into()));
        if !params.resource_version.is_empty() {
            q.push(("resourceVersion", params.resource_version.clone()));
        }
        if params.bookmarks {
            q.push(("allowWatchBookmarks", "true".into()));
        }
        if let Some(t) = params.timeout {
            q.push(("timeoutSeconds", t.as_secs().max(1).to_string()));
        }
        let resp = self
            .request(Method::GET, &collection_path(res, ns))
            .query(&q);
        let resp = self.streamed(resp).await?;
        Ok(Events {
            body: Box::pin(resp.bytes_stream()),
            buf: BytesMut::new(),
            done: false,
        })
    }
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The bytes of a container log, as the server sends them.
pub struct LogStream {
    body: ByteStream,
}

impl LogStream {
    /// The next chunk; `None` at the end of the log (or of a followed container).
    pub async fn next(&mut self) -> Option<Result<Bytes>> {
        self.body.next().await.map(|r| r.map_err(transport))
    }
}

pub(super) struct Events {
    body: ByteStream,
    buf: BytesMut,
    done: bool,
}

impl Events {
    pub(super) async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(end) = memchr::memchr(b'\n', &self.buf) {
                let line = self.buf.split_to(end + 1);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(parse_event(&line[..end]).inspect_err(|_| self.done = true));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(transport(e)));
                }
                None => return None,
            }
        }
    }
}

/// The text of a `Warning` header (`299 - "text"`, RFC 7234): the quoted text unescaped,
/// or the header as it is when it has another form.
fn warning_text(header: &str) -> String {
    let Some(quoted) = header
        .splitn(3, ' ')
        .nth(2)
        .and_then(|rest| rest.strip_prefix('"'))
    else {
        return header.to_string();
    };
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => return out,
            c => out.push(c),
        }
    }
    header.to_string()
}

fn parse_event(line: &[u8]) -> Result<Event> {
    let mut v: Value = serde_json::from_slice(line)
        .map_err(|e| Error::Transport(format!("a watch event is not JSON: {e}")))?;
    let object = v["object"].take();
    match v["type"].as_str().unwrap_or("") {
        "ADDED" => Ok(Event::Added(object)),
        "MODIFIED" => Ok(Event::Modified(object)),
        "DELETED" => Ok(Event::Deleted(object)),
        "BOOKMARK" => Ok(Event::Bookmark(
            object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        )),
        "ERROR" => {
            let code = object["code"].as_u64().unwrap_or(500) as u16;
            let body = serde_json::to_vec(&object).unwrap_or_default();
            Err(status_error(
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                &body,
            ))
        }
        other => Err(Error::Transport(format!(
            "unknown watch event type {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::warning_text;

    #[test]
    fn warning_headers_give_their_quoted_text() {
        assert_eq!(
            warning_text(r#"299 - "unknown field \"metadata.bogusField\"""#),
            r#"unknown field "metadata.bogusField""#
        );
        assert_eq!(
            warning_text(r#"299 - "deprecated" "Mon, 01 Jan 2024 00:00:00 GMT""#),
            "deprecated"
        );
        assert_eq!(warning_text("odd"), "odd");
    }
}
